// Anthropic Messages in front, Google's Gemini behind (the Gemini API and Vertex AI alike): a
// `POST /v1/messages` body rewritten as a `generateContent` request, and Gemini's answer (JSON, SSE
// stream or error) rewritten as an Anthropic message. Chat Completions and Responses clients reach
// Gemini through this translator composed with theirs. A parameter Gemini cannot honour is refused
// with a 400 naming it when ignoring it would change what the client gets, and dropped (and named)
// when it is only a hint.
//
// The request body also carries `model` and `stream`, which are not Gemini's: Gemini takes the
// model in the path and streams by another method (`streamGenerateContent?alt=sse`), so the
// provider reads both and removes them before sending.
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';
import { given, isObject, describeValue } from './json.ts';
import {
  GeminiStreamToMessages,
  SIGNATURE_PREFIX,
  anthropicErrorFromGoogle,
  anthropicUsage,
  firstCandidate,
  messageId,
  partsOf,
  refusalDetails,
  signatureOf,
  stopReason,
  toolId,
  toolInput,
} from './gemini-to-messages-stream.ts';


function unsupported(param: string, what: string): TranslationError {
  return new TranslationError(param, `${what} is not supported when routed to a Gemini model`);
}

/** Accepted and not sent: no Gemini equivalent, and leaving them out only loses a hint. */
const DROPPED = new Set(['metadata', 'service_tier', 'container', 'cache_control']);

/** The top-level keys translated below (`thinking` and `mcp_servers` are judged by value); anything else is refused as unknown. */
const HANDLED = new Set(['model', 'messages', 'max_tokens', 'system', 'stop_sequences', 'temperature', 'top_p', 'top_k', 'stream', 'tools', 'tool_choice']);

/** Keys of a client tool that only tune how Anthropic serves it; without them the tool is offered and called the same way. */
const TOOL_HINTS = new Set(['cache_control', 'defer_loading', 'eager_input_streaming', 'input_examples', 'allowed_callers', 'strict']);

/**
 * Google's documented stand-in for a function call's thought signature when the call was not made
 * by Gemini (another model's history, or a client that kept no thinking blocks): Gemini 3 refuses
 * function calls of the current turn without one ("Thought signatures", Gemini API docs).
 */
export const SKIP_SIGNATURE = 'skip_thought_signature_validator';

/** The media types Gemini is told for a file by URL, from the URL's extension (Anthropic's URL sources carry none). */
const URL_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
  pdf: 'application/pdf',
};

/** Collects the names of what was dropped, each once, in the order met. */
class Dropped {
  readonly names: string[] = [];
  add(name: string): void {
    if (!this.names.includes(name)) this.names.push(name);
  }
  /** Prompt caching is Anthropic's own (Gemini caches implicitly); a marker anywhere is dropped and named once. */
  cache(block: Json): void {
    if (given(block.cache_control)) this.add('cache_control');
  }
}

/** What the request knows while reading the conversation: the tool calls so far (id → name). */
interface Context {
  readonly dropped: Dropped;
  readonly calls: Map<string, string>;
}

/** A public http(s) URL Gemini fetches itself (the Gemini API and Vertex AI read both in `fileData`). */
function fileUrl(url: unknown, param: string): URL {
  let parsed: URL | undefined;
  try {
    parsed = typeof url === 'string' ? new URL(url) : undefined;
  } catch {
    parsed = undefined;
  }
  if (parsed === undefined || (parsed.protocol !== 'https:' && parsed.protocol !== 'http:')) {
    throw new TranslationError(param, 'a URL source must be an http or https URL');
  }
  return parsed;
}

/**
 * An image by URL: Gemini needs its media type (Vertex AI requires it), told here by the URL's
 * extension. An image whose URL does not say is refused rather than sent with a guessed type.
 */
function imageUrlPart(url: unknown, param: string): Json {
  const parsed = fileUrl(url, param);
  const extension = /\.([a-z0-9]+)$/i.exec(parsed.pathname)?.[1]?.toLowerCase() ?? '';
  const type = Object.hasOwn(URL_TYPES, extension) ? URL_TYPES[extension] : undefined;
  if (type === undefined || !type.startsWith('image/')) {
    throw new TranslationError(param, "an image URL must end in .png, .jpg, .jpeg, .gif, .webp, .heic or .heif (Gemini needs the image's type); send the image as base64 instead");
  }
  return { fileData: { fileUri: parsed.href, mimeType: type } };
}

function imagePart(block: Json, param: string): Json {
  const source = isObject(block.source) ? block.source : {};
  if (source.type === 'base64' && typeof source.media_type === 'string' && typeof source.data === 'string') {
    return { inlineData: { mimeType: source.media_type, data: source.data } };
  }
  if (source.type === 'url') return imageUrlPart(source.url, `${param}.source.url`);
  throw unsupported(`${param}.source`, `an image source of type '${describeValue(source.type)}'`);
}

/** A document: a PDF (base64 or by URL) as a file, plain text as text. */
function documentParts(block: Json, param: string, context: Context): Json[] {
  const source = isObject(block.source) ? block.source : {};
  if (isObject(block.citations) && block.citations.enabled === true) context.dropped.add('citations');
  if (source.type === 'base64' && typeof source.media_type === 'string' && typeof source.data === 'string') {
    return [{ inlineData: { mimeType: source.media_type, data: source.data } }];
  }
  if (source.type === 'text' && typeof source.data === 'string') return [{ text: source.data }];
  if (source.type === 'url') return [{ fileData: { fileUri: fileUrl(source.url, `${param}.source.url`).href, mimeType: 'application/pdf' } }];
  if (source.type === 'content') {
    if (typeof source.content === 'string') return [{ text: source.content }];
    if (Array.isArray(source.content)) return source.content.map((inner, k) => mediaOrText(inner, `${param}.source.content[${k}]`, context));
  }
  throw unsupported(`${param}.source`, `a document source of type '${describeValue(source.type)}'`);
}

/** A text or image block (inside a tool result or a document). */
function mediaOrText(block: unknown, param: string, context: Context): Json {
  if (!isObject(block)) throw new TranslationError(param, 'a content block must be an object');
  context.dropped.cache(block);
  if (block.type === 'text' && typeof block.text === 'string') return { text: block.text };
  if (block.type === 'image') return imagePart(block, param);
  throw unsupported(param, `a '${describeValue(block.type)}' block here`);
}

/**
 * A tool result as Gemini's functionResponse, named after the call it answers. Its text is the
 * `output` (or the `error`, as Gemini's docs name the keys); its images go in the response's parts.
 */
function functionResponse(block: Json, param: string, context: Context): Json {
  const id = block.tool_use_id;
  if (typeof id !== 'string') throw new TranslationError(`${param}.tool_use_id`, 'tool_result needs a tool_use_id');
  const name = context.calls.get(id);
  if (name === undefined) throw new TranslationError(`${param}.tool_use_id`, `tool_result '${id}' answers no tool_use earlier in the conversation`);
  const texts: string[] = [];
  const media: Json[] = [];
  if (typeof block.content === 'string') texts.push(block.content);
  else if (Array.isArray(block.content)) {
    block.content.forEach((inner, k) => {
      const part = mediaOrText(inner, `${param}.content[${k}]`, context);
      if (typeof part.text === 'string') texts.push(part.text);
      else media.push(part);
    });
  } else if (given(block.content)) throw new TranslationError(`${param}.content`, 'tool_result content must be a string or an array of blocks');
  const text = texts.join('\n');
  const response: Json = { id, name, response: block.is_error === true ? { error: text } : { output: text } };
  if (media.length > 0) response.parts = media;
  return { functionResponse: response };
}

/** A user message: its tool results first (they answer the calls of the turn before), then the rest. */
function userParts(content: unknown, param: string, context: Context): Json[] {
  if (typeof content === 'string') return [{ text: content }];
  if (!Array.isArray(content)) throw new TranslationError(`${param}.content`, 'content must be a string or an array of blocks');
  const results: Json[] = [];
  const parts: Json[] = [];
  content.forEach((block, j) => {
    const at = `${param}.content[${j}]`;
    if (!isObject(block)) throw new TranslationError(at, 'a content block must be an object');
    context.dropped.cache(block);
    if (block.type === 'text' && typeof block.text === 'string') parts.push({ text: block.text });
    else if (block.type === 'image') parts.push(imagePart(block, at));
    else if (block.type === 'document') parts.push(...documentParts(block, at, context));
    else if (block.type === 'tool_result') results.push(functionResponse(block, at, context));
    else throw unsupported(at, `a '${describeValue(block.type)}' content block`);
  });
  return [...results, ...parts];
}

/**
 * A thinking block of Gemini's (see gemini-to-messages-stream.ts): with text, the thought part it
 * was; empty, the signature of the part before it. Claude's thinking blocks, signed for Anthropic
 * only, are left out: the answer they led to is in the text and tool calls kept.
 */
function thinkingPart(block: Json, parts: Json[]): void {
  if (block.type !== 'thinking' || typeof block.signature !== 'string' || !block.signature.startsWith(SIGNATURE_PREFIX)) return;
  const signature = block.signature.slice(SIGNATURE_PREFIX.length);
  const thinking = typeof block.thinking === 'string' ? block.thinking : '';
  if (thinking !== '') {
    parts.push(signature === '' ? { text: thinking, thought: true } : { text: thinking, thought: true, thoughtSignature: signature });
    return;
  }
  if (signature === '') return;
  const previous = parts.at(-1);
  if (previous !== undefined && previous.thought !== true && previous.thoughtSignature === undefined) previous.thoughtSignature = signature;
  else parts.push({ text: '', thoughtSignature: signature });
}

function modelParts(content: unknown, param: string, context: Context): Json[] {
  if (typeof content === 'string') return [{ text: content }];
  if (!Array.isArray(content)) throw new TranslationError(`${param}.content`, 'content must be a string or an array of blocks');
  const parts: Json[] = [];
  content.forEach((block, j) => {
    const at = `${param}.content[${j}]`;
    if (!isObject(block)) throw new TranslationError(at, 'a content block must be an object');
    context.dropped.cache(block);
    if (block.type === 'text' && typeof block.text === 'string') parts.push({ text: block.text });
    else if (block.type === 'tool_use') {
      if (typeof block.id !== 'string' || typeof block.name !== 'string') throw new TranslationError(at, 'tool_use needs an id and a name');
      if (given(block.input) && !isObject(block.input)) throw new TranslationError(`${at}.input`, 'tool_use input must be an object');
      context.calls.set(block.id, block.name);
      parts.push({ functionCall: { id: block.id, name: block.name, args: block.input ?? {} } });
    } else if (block.type === 'thinking' || block.type === 'redacted_thinking') thinkingPart(block, parts);
    else throw unsupported(at, `a '${describeValue(block.type)}' content block in an assistant message`);
  });
  // A turn's function calls need a signature on the first of them; calls Gemini did not sign get Google's stand-in.
  const calls = parts.filter((part) => isObject(part.functionCall));
  const first = calls[0];
  if (first !== undefined && calls.every((part) => part.thoughtSignature === undefined)) first.thoughtSignature = SKIP_SIGNATURE;
  return parts;
}

/** The conversation as Gemini's contents: roles user and model, consecutive turns of one role merged. */
function contents(messages: unknown, context: Context): Json[] {
  if (!Array.isArray(messages)) throw new TranslationError('messages', "'messages' must be an array");
  const out: { role: string; parts: Json[] }[] = [];
  messages.forEach((message, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw new TranslationError(param, 'a message must be an object');
    let role: string;
    let parts: Json[];
    if (message.role === 'user') {
      role = 'user';
      parts = userParts(message.content, param, context);
    } else if (message.role === 'assistant') {
      role = 'model';
      parts = modelParts(message.content, param, context);
    } else throw new TranslationError(`${param}.role`, `role must be 'user' or 'assistant', not '${describeValue(message.role)}'`);
    // A turn that was only Claude's thinking leaves nothing to send.
    if (parts.length === 0) return;
    const last = out.at(-1);
    if (last !== undefined && last.role === role) last.parts.push(...parts);
    else out.push({ role, parts });
  });
  return out;
}

/** `system` as Gemini's systemInstruction: one text part per block. */
function systemInstruction(system: unknown, dropped: Dropped): Json | undefined {
  if (typeof system === 'string') return system === '' ? undefined : { parts: [{ text: system }] };
  if (!Array.isArray(system)) throw new TranslationError('system', "'system' must be a string or an array of text blocks");
  const parts = system.map((block, i) => {
    if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') throw new TranslationError(`system[${i}]`, 'system blocks must be text blocks');
    dropped.cache(block);
    return { text: block.text };
  });
  return parts.length === 0 ? undefined : { parts };
}

/**
 * A tool's input schema for `parametersJsonSchema`, which takes JSON Schema as it is (the official
 * SDK sends MCP tools' schemas there unchanged), where `parameters` takes only Google's OpenAPI
 * subset and refuses `additionalProperties`, `$ref`, `const`, type lists… The `$schema` declaration
 * says nothing about the parameters and some Gemini versions refuse it: it is left out.
 */
function parametersSchema(schema: unknown): Json {
  if (!isObject(schema)) return { type: 'object', properties: {} };
  const { $schema: _declaration, ...rest } = schema;
  return rest;
}

function functionDeclarations(tools: unknown, dropped: Dropped): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', "'tools' must be an array");
  return tools.map((tool, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, 'a tool must be an object');
    // Server tools (web search, bash, code execution, …) run inside Anthropic's API.
    if (given(tool.type) && tool.type !== 'custom') throw unsupported(param, `the server tool '${describeValue(tool.type)}'`);
    if (typeof tool.name !== 'string') throw new TranslationError(`${param}.name`, 'a tool needs a name');
    const declaration: Json = { name: tool.name };
    if (typeof tool.description === 'string') declaration.description = tool.description;
    declaration.parametersJsonSchema = parametersSchema(tool.input_schema);
    for (const key of Object.keys(tool)) {
      if (TOOL_HINTS.has(key) && given(tool[key]) && tool[key] !== false) dropped.add(key);
    }
    return declaration;
  });
}

/** `tool_choice` as Gemini's functionCallingConfig. Gemini has no switch for parallel calls: that hint is dropped. */
function functionCallingConfig(choice: unknown, dropped: Dropped): Json {
  if (!isObject(choice)) throw new TranslationError('tool_choice', "'tool_choice' must be an object");
  if (choice.disable_parallel_tool_use === true) dropped.add('disable_parallel_tool_use');
  if (choice.type === 'auto') return { mode: 'AUTO' };
  if (choice.type === 'any') return { mode: 'ANY' };
  if (choice.type === 'none') return { mode: 'NONE' };
  if (choice.type === 'tool') {
    if (typeof choice.name !== 'string') throw new TranslationError('tool_choice.name', "tool_choice 'tool' needs a name");
    return { mode: 'ANY', allowedFunctionNames: [choice.name] };
  }
  throw new TranslationError('tool_choice.type', `unknown tool_choice type '${describeValue(choice.type)}'`);
}

/**
 * `thinking` as Gemini's thinkingConfig: a budget (or -1, Gemini's dynamic budget, for adaptive)
 * and thoughts in the answer unless the client asked for them omitted. Disabled sends nothing:
 * Gemini's answers carry no thoughts unless asked, and models that cannot think refuse the field.
 */
function thinkingConfig(config: unknown): Json | undefined {
  if (!isObject(config)) throw new TranslationError('thinking', "'thinking' must be an object");
  const includeThoughts = config.display !== 'omitted';
  if (config.type === 'disabled') return undefined;
  if (config.type === 'adaptive') return { thinkingBudget: -1, includeThoughts };
  if (config.type === 'enabled') {
    if (typeof config.budget_tokens !== 'number' || !Number.isInteger(config.budget_tokens)) throw new TranslationError('thinking.budget_tokens', 'thinking needs a budget_tokens integer');
    return { thinkingBudget: config.budget_tokens, includeThoughts };
  }
  throw unsupported('thinking.type', `thinking of type '${describeValue(config.type)}'`);
}

function generateContentRequest(body: Json, upstreamModel: string): TranslatedRequest {
  const dropped = new Dropped();
  // In the body's order, so `dropped` names them as the client wrote them.
  for (const key of Object.keys(body)) {
    if (!given(body[key])) continue;
    if (DROPPED.has(key)) dropped.add(key);
    else if (key === 'thinking') continue;
    else if (key === 'mcp_servers') {
      if (!Array.isArray(body.mcp_servers) || body.mcp_servers.length > 0) throw unsupported('mcp_servers', 'MCP servers');
      dropped.add('mcp_servers');
    } else if (!HANDLED.has(key)) throw new TranslationError(key, `unknown parameter '${key}'`);
  }

  const context: Context = { dropped, calls: new Map() };
  const out: Json = { model: upstreamModel, stream: body.stream === true, contents: contents(body.messages, context) };
  const system = given(body.system) ? systemInstruction(body.system, dropped) : undefined;
  if (system !== undefined) out.systemInstruction = system;

  const generation: Json = {};
  if (given(body.max_tokens)) generation.maxOutputTokens = body.max_tokens;
  // Anthropic's 0 to 1 is within Gemini's 0 to 2, with the same meaning.
  if (given(body.temperature)) generation.temperature = body.temperature;
  if (given(body.top_p)) generation.topP = body.top_p;
  if (given(body.top_k)) generation.topK = body.top_k;
  if (given(body.stop_sequences)) generation.stopSequences = body.stop_sequences;
  const thinking = given(body.thinking) ? thinkingConfig(body.thinking) : undefined;
  if (thinking !== undefined) generation.thinkingConfig = thinking;
  if (Object.keys(generation).length > 0) out.generationConfig = generation;

  const declarations = given(body.tools) ? functionDeclarations(body.tools, dropped) : [];
  // Without tools a tool_choice changes nothing; Gemini is not sent one.
  if (declarations.length > 0) out.tools = [{ functionDeclarations: declarations }];
  if (given(body.tool_choice)) {
    const config = functionCallingConfig(body.tool_choice, dropped);
    if (declarations.length > 0) out.toolConfig = { functionCallingConfig: config };
  }
  return { body: out, dropped: dropped.names };
}

/**
 * A Gemini answer as an Anthropic message. A prompt Gemini blocks whole (`promptFeedback.blockReason`,
 * no candidate) is an answer with no content and stop_reason "refusal", its reason in stop_details.
 */
function messageFromGemini(body: Json, model: string): Json {
  const id = messageId(body.responseId);
  const candidate = firstCandidate(body);
  const content: Json[] = [];
  let calls = 0;
  /** The text or thinking block being filled, and the signature it carries. */
  let open: { block: Json; signature: string | undefined } | undefined;
  const carrier = (signature: string): void => {
    content.push({ type: 'thinking', thinking: '', signature: SIGNATURE_PREFIX + signature });
  };
  const close = (): void => {
    if (open === undefined) return;
    const { block, signature } = open;
    open = undefined;
    if (block.type === 'thinking') block.signature = SIGNATURE_PREFIX + (signature ?? '');
    else if (signature !== undefined) carrier(signature);
  };
  const append = (kind: 'text' | 'thinking', text: string, signature: string | undefined): void => {
    if (open?.block.type !== kind || (signature !== undefined && open.signature !== undefined)) {
      close();
      open = { block: kind === 'text' ? { type: 'text', text: '' } : { type: 'thinking', thinking: '', signature: '' }, signature: undefined };
      content.push(open.block);
    }
    if (signature !== undefined) open.signature = signature;
    open.block[kind] = `${open.block[kind] as string}${text}`;
  };
  // The same rules as the stream's (GeminiStreamToMessages), so both give the same blocks.
  for (const part of partsOf(candidate)) {
    const signature = signatureOf(part);
    if (isObject(part.functionCall)) {
      close();
      const call = part.functionCall;
      content.push({ type: 'tool_use', id: toolId(call.id, id, calls++), name: typeof call.name === 'string' ? call.name : '', input: toolInput(call.args) });
      if (signature !== undefined) carrier(signature);
    } else if (typeof part.text === 'string') {
      if (part.thought === true) append('thinking', part.text, signature);
      else if (part.text !== '') append('text', part.text, signature);
      else if (signature !== undefined) {
        close();
        carrier(signature);
      }
    }
  }
  close();

  const feedback = isObject(body.promptFeedback) ? body.promptFeedback : {};
  const blocked = candidate === undefined && typeof feedback.blockReason === 'string';
  const reason = blocked ? 'refusal' : stopReason(candidate?.finishReason, calls > 0);
  let details: Json | null = null;
  if (blocked) details = refusalDetails(feedback.blockReasonMessage, `the provider blocked the prompt (${feedback.blockReason as string})`);
  else if (reason === 'refusal') details = refusalDetails(candidate?.finishMessage, `the provider stopped the answer (${describeValue(candidate?.finishReason)})`);
  return {
    id,
    type: 'message',
    role: 'assistant',
    model: typeof body.modelVersion === 'string' && body.modelVersion !== '' ? body.modelVersion : model,
    content,
    stop_reason: reason,
    stop_sequence: null,
    stop_details: details,
    usage: anthropicUsage(body.usageMetadata),
  };
}

/**
 * The Messages → Gemini translator for one request. `model` names the answer when Gemini's does
 * not (`modelVersion`, which both the Gemini API and Vertex AI send, is preferred); the registry
 * passes the upstream model.
 */
export function geminiTranslation(model: string): Translator {
  return {
    from: 'messages',
    to: 'generate_content',
    request: generateContentRequest,
    response: (body) => messageFromGemini(body, model),
    error: (status, body) => anthropicErrorFromGoogle(status, body),
    stream: () => new GeminiStreamToMessages(model),
  };
}
