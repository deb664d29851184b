// What the echo provider says: the caller's last message, in each API's own shape.
import { createHash } from 'node:crypto';

type Json = Record<string, unknown>;

export function lastUserText(body: Json): string {
  // Chat takes `messages`; the Responses API takes `input`, a string or a list of role items.
  const isConversation = Array.isArray(body.input) && (body.input as Json[]).some((item) => typeof item?.role === 'string');
  const messages = Array.isArray(body.messages) ? (body.messages as Json[]) : isConversation ? (body.input as Json[]) : [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const message = messages[i];
    if (message?.role === 'user') return textOf(message.content);
  }
  if (body.input !== undefined) return textOf(body.input);
  if (body.prompt !== undefined) return textOf(body.prompt);
  return '';
}

/** Text parts are looked for this deep and no deeper: a body nested thousands deep must not overflow the stack. */
const MAX_DEPTH = 16;

function textOf(content: unknown, depth = 0): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content) && depth < MAX_DEPTH) {
    return content
      .map((part) => (typeof part === 'string' ? part : typeof (part as Json)?.text === 'string' ? (part as Json).text : textOf((part as Json)?.content, depth + 1)))
      .filter(Boolean)
      .join(' ');
  }
  return '';
}

export function countTokens(text: string): number {
  const words = text.trim().split(/\s+/).filter(Boolean).length;
  return Math.max(1, words);
}

/** The reply split into stream pieces: one word (with its leading space) each. */
export function pieces(text: string): string[] {
  return text.match(/\s*\S+/g) ?? [text];
}

export function replyText(body: Json): string {
  const said = lastUserText(body);
  return said ? `echo: ${said}` : 'echo: (empty message)';
}

let counter = 0;
export function newId(prefix: string): string {
  counter = (counter + 1) % 1e9;
  return `${prefix}${process.pid.toString(36)}${Date.now().toString(36)}${counter.toString(36)}`;
}

export function embedding(text: string, dimensions: number): number[] {
  const out: number[] = [];
  let block = Buffer.alloc(0);
  for (let i = 0; out.length < dimensions; i++) {
    if (i % 32 === 0) block = createHash('sha256').update(`${text}\0${i / 32}`).digest();
    out.push((block[i % 32]! - 127.5) / 127.5);
  }
  const norm = Math.hypot(...out) || 1;
  return out.map((v) => Math.round((v / norm) * 1e6) / 1e6);
}
