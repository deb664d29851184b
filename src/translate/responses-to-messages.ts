// OpenAI Responses in front, Anthropic Messages behind: a `POST /v1/responses` body rewritten for
// `POST /v1/messages`, and Anthropic's answer (JSON, SSE stream or error) rewritten as a Response
// and its event stream. Text, images and function tools translate; Anthropic keeps no state between
// requests, so what needs OpenAI's stored responses (previous_response_id, conversation, background,
// stored prompts, item references) is refused with a 400 naming the parameter, as is whatever would
// change the answer if ignored. Hints without an equivalent are dropped and named.
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';
import { toOpenAIError } from './errors.ts';
import { given, isObject } from './json.ts';
import { anthropicChoice, anthropicTemperature, anthropicTool, anthropicToolChoice, compact, DEFAULT_MAX_TOKENS, IMAGE_TYPES, textBlock, withCache, type Block } from './anthropic-blocks.ts';
import { translateResponse } from './responses-to-messages-answer.ts';
import { ResponsesStream } from './responses-to-messages-stream.ts';

/** Accepted and not sent: no Anthropic equivalent, and leaving them out only loses a hint or a record. */
const DROPPED = new Set([
  'reasoning',
  'include',
  'metadata',
  'truncation',
  'service_tier',
  'store',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  'safety_identifier',
  // A limit on calls to OpenAI's built-in tools, which are refused here: nothing left to limit.
  'max_tool_calls',
]);

/**
 * Values of dropped parameters that ask for what Anthropic does anyway: not reported. Nothing is
 * stored upstream (store: false) and a too long input is refused, not cut (truncation: disabled).
 */
const HONOURED: Record<string, unknown> = { store: false, truncation: 'disabled' };

const STATELESS = 'Anthropic keeps no conversation state: send the whole conversation in input';

/** OpenAI's stored responses, which a background response is polled from. */
const UNSTORED = 'Anthropic stores no responses to poll: send the request without background';

/** Refused when given: leaving them out would answer something other than what was asked. */
const REFUSED: Record<string, string> = {
  previous_response_id: `previous_response_id is not supported when routed to an Anthropic model (${STATELESS})`,
  conversation: `conversation is not supported when routed to an Anthropic model (${STATELESS})`,
  prompt: 'stored prompts (prompt) are not supported when routed to an Anthropic model: send instructions and input',
  context_management: 'context_management (server-side compaction) is not supported when routed to an Anthropic model',
  moderation: 'moderated responses are not supported when routed to an Anthropic model',
};

/** Every other top-level key the Responses API defines; anything else is refused as unknown. */
const HANDLED = new Set([
  'model',
  'input',
  'instructions',
  'max_output_tokens',
  'temperature',
  'top_p',
  'stream',
  'stream_options',
  'tools',
  'tool_choice',
  'parallel_tool_calls',
  'user',
  'text',
  'background',
  'top_logprobs',
]);

function imageBlock(part: Json, param: string, dropped: Set<string>): Block {
  const url = part.image_url;
  if (typeof url !== 'string') {
    if (given(part.file_id)) {
      throw new TranslationError(`${param}.file_id`, `${param}: an image by file_id is not supported when routed to an Anthropic model (OpenAI's files are not Anthropic's); send image_url`);
    }
    throw new TranslationError(`${param}.image_url`, `${param}.image_url must be a string`);
  }
  if (given(part.detail) && part.detail !== 'auto') dropped.add('input[].content[].detail');
  if (/^https?:\/\//i.test(url)) return withCache({ type: 'image', source: { type: 'url', url } }, part);
  const data = /^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$/s.exec(url);
  if (data === null) throw new TranslationError(`${param}.image_url`, `${param}: an image must be an http(s) URL or a base64 data: URL`);
  const mediaType = data[1]!.toLowerCase();
  if (!IMAGE_TYPES.has(mediaType)) {
    throw new TranslationError(`${param}.image_url`, `${param}: image type ${mediaType} is not supported when routed to an Anthropic model (jpeg, png, gif, webp)`);
  }
  return withCache({ type: 'image', source: { type: 'base64', media_type: mediaType, data: data[3]! } }, part);
}

/** A message's content for Anthropic; `images` says whether the role may carry them (only user messages can). */
function messageContent(content: unknown, param: string, images: boolean, dropped: Set<string>): Block[] {
  if (typeof content === 'string') return textBlock(content);
  if (!Array.isArray(content)) throw new TranslationError(param, `${param} must be a string or an array of content parts`);
  return content.flatMap((part: unknown, j): Block[] => {
    const at = `${param}[${j}]`;
    if (!isObject(part)) throw new TranslationError(at, `${at} must be an object`);
    // output_text is how an earlier answer comes back (the client replays `output`): text all the same.
    if ((part.type === 'input_text' || part.type === 'output_text') && typeof part.text === 'string') return textBlock(part.text, part);
    // A refusal the model gave earlier is still what it said: kept as text.
    if (part.type === 'refusal' && typeof part.refusal === 'string') return textBlock(part.refusal);
    if (part.type === 'input_image') {
      if (!images) throw new TranslationError(at, `${at}: Anthropic takes images in user messages only`);
      return [imageBlock(part, at, dropped)];
    }
    if (part.type === 'input_file') throw new TranslationError(at, `${at}: file input is not supported when routed to an Anthropic model`);
    if (part.type === 'input_audio') throw new TranslationError(at, `${at}: audio input is not supported when routed to an Anthropic model`);
    throw new TranslationError(at, `${at}: unknown content part type ${JSON.stringify(part.type)}`);
  });
}

/** A function_call_output's `output`: a string, or text and image parts. */
function toolResultContent(output: unknown, param: string, dropped: Set<string>): string | Block[] {
  if (typeof output === 'string') return output;
  return compact(messageContent(output, param, true, dropped));
}

function toolUse(item: Json, param: string): Block {
  if (typeof item.call_id !== 'string') throw new TranslationError(`${param}.call_id`, `${param}.call_id must be a string`);
  if (typeof item.name !== 'string') throw new TranslationError(`${param}.name`, `${param}.name must be a string`);
  const args = typeof item.arguments === 'string' ? item.arguments : '';
  let input: unknown;
  try {
    // Some clients send '' for a call without arguments: that is the empty object.
    input = args.trim() === '' ? {} : JSON.parse(args);
  } catch {
    throw new TranslationError(`${param}.arguments`, `${param}.arguments: the arguments of ${item.call_id} are not valid JSON`);
  }
  if (!isObject(input)) throw new TranslationError(`${param}.arguments`, `${param}.arguments: the arguments of ${item.call_id} must be a JSON object`);
  return { type: 'tool_use', id: item.call_id, name: item.name, input };
}

interface Turn {
  role: 'user' | 'assistant';
  content: Block[];
}

function translateInput(input: unknown, system: Block[], dropped: Set<string>): Turn[] {
  if (typeof input === 'string') {
    const blocks = textBlock(input);
    return blocks.length === 0 ? [] : [{ role: 'user', content: blocks }];
  }
  if (!Array.isArray(input)) throw new TranslationError('input', 'input must be a string or an array of input items');
  const turns: Turn[] = [];
  // Anthropic requires user and assistant to alternate: what OpenAI sends as several items in a row
  // (a message and the calls it made, parallel tool results and the next user message) becomes one message.
  const add = (role: Turn['role'], blocks: Block[]): void => {
    if (blocks.length === 0) return;
    const last = turns.at(-1);
    if (last?.role === role) last.content.push(...blocks);
    else turns.push({ role, content: blocks });
  };
  input.forEach((item: unknown, i) => {
    const param = `input[${i}]`;
    if (!isObject(item)) throw new TranslationError(param, `${param} must be an object`);
    const type = item.type ?? 'message';
    switch (type) {
      case 'message':
        switch (item.role) {
          case 'system':
          case 'developer':
            // Anthropic has one system prompt, outside the conversation: every system and developer
            // message goes there, after the instructions, in order, wherever it stood.
            system.push(...messageContent(item.content, `${param}.content`, false, dropped));
            return;
          case 'user':
            add('user', messageContent(item.content, `${param}.content`, true, dropped));
            return;
          case 'assistant':
            add('assistant', messageContent(item.content, `${param}.content`, false, dropped));
            return;
          default:
            throw new TranslationError(`${param}.role`, `${param}: unknown role ${JSON.stringify(item.role)}`);
        }
      case 'function_call':
        add('assistant', [toolUse(item, param)]);
        return;
      case 'function_call_output':
        if (typeof item.call_id !== 'string') throw new TranslationError(`${param}.call_id`, `${param}.call_id must be a string`);
        add('user', [{ type: 'tool_result', tool_use_id: item.call_id, content: toolResultContent(item.output, `${param}.output`, dropped) }]);
        return;
      case 'reasoning':
        // Another model's reasoning: Anthropic's thinking blocks carry Anthropic's own signature,
        // so it cannot go as thinking, and the conversation reads the same without it.
        dropped.add('input[].reasoning');
        return;
      case 'item_reference':
        throw new TranslationError(param, `${param}: item_reference is not supported when routed to an Anthropic model (${STATELESS})`);
      default:
        throw new TranslationError(param, `${param}: input items of type ${JSON.stringify(type)} are not supported when routed to an Anthropic model`);
    }
  });
  // Anthropic wants a user message's tool_result blocks before anything else in it.
  for (const turn of turns) {
    if (turn.role !== 'user') continue;
    const results = turn.content.filter((block) => block.type === 'tool_result');
    if (results.length > 0) turn.content = [...results, ...turn.content.filter((block) => block.type !== 'tool_result')];
  }
  return turns;
}

function translateTools(tools: unknown, dropped: Set<string>): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', 'tools must be an array');
  return tools.map((tool: unknown, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, `${param} must be an object`);
    if (tool.type !== 'function') {
      throw new TranslationError(param, `${param}: tools of type ${JSON.stringify(tool.type)} are not supported when routed to an Anthropic model (function tools only)`);
    }
    if (typeof tool.name !== 'string') throw new TranslationError(`${param}.name`, `${param}.name must be a string`);
    if (tool.strict === true) dropped.add('tools[].strict');
    return anthropicTool(tool as Json & { name: string });
  });
}

function translateToolChoice(choice: unknown): Json {
  const named = isObject(choice) && choice.type === 'function' && typeof choice.name === 'string' ? choice.name : undefined;
  return anthropicChoice(choice, named);
}

function translateText(text: unknown, dropped: Set<string>): void {
  if (!isObject(text)) throw new TranslationError('text', 'text must be an object');
  const format = text.format;
  if (isObject(format)) {
    if (format.type === 'json_schema' || format.type === 'json_object') {
      throw new TranslationError('text.format', `text.format ${format.type} is not supported when routed to an Anthropic model`);
    }
    if (format.type !== 'text') throw new TranslationError('text.format', `text.format: unknown type ${JSON.stringify(format.type)}`);
  } else if (given(format)) throw new TranslationError('text.format', 'text.format must be an object');
  if (given(text.verbosity)) dropped.add('text.verbosity');
}

function translateRequest(body: Json, upstreamModel: string): TranslatedRequest {
  for (const key of Object.keys(body)) {
    const refused = Object.hasOwn(REFUSED, key) ? REFUSED[key] : undefined;
    const value = body[key];
    if (refused !== undefined) {
      // An empty list asks for nothing: context_management: [] is as good as absent.
      if (given(value) && !(Array.isArray(value) && value.length === 0)) throw new TranslationError(key, refused);
    } else if (!HANDLED.has(key) && !DROPPED.has(key)) {
      // Refused rather than forwarded or ignored: a parameter this translator does not know could
      // mean anything, and Anthropic would reject it anyway.
      throw new TranslationError(key, `unknown parameter '${key}' (not supported when routed to an Anthropic model)`);
    }
  }
  const dropped = new Set<string>();
  for (const key of Object.keys(body)) {
    if (DROPPED.has(key) && given(body[key]) && body[key] !== HONOURED[key]) dropped.add(key);
  }

  if (body.background === true) {
    throw new TranslationError('background', `background responses are not supported when routed to an Anthropic model (${UNSTORED})`);
  }
  if (given(body.top_logprobs) && body.top_logprobs !== 0) {
    throw new TranslationError('top_logprobs', 'top_logprobs: log probabilities are not supported when routed to an Anthropic model');
  }
  if (given(body.text)) translateText(body.text, dropped);
  // No obfuscation padding is added to this stream; the rest of stream_options is honoured.
  if (isObject(body.stream_options) && given(body.stream_options.include_obfuscation) && body.stream_options.include_obfuscation !== false) {
    dropped.add('stream_options.include_obfuscation');
  }

  const system: Block[] = [];
  if (given(body.instructions)) {
    if (typeof body.instructions !== 'string') throw new TranslationError('instructions', 'instructions must be a string');
    system.push(...textBlock(body.instructions));
  }
  if (!given(body.input)) throw new TranslationError('input', `input is required when routed to an Anthropic model (${STATELESS})`);
  const turns = translateInput(body.input, system, dropped);

  const maxTokens = body.max_output_tokens ?? DEFAULT_MAX_TOKENS;
  if (typeof maxTokens !== 'number') throw new TranslationError('max_output_tokens', 'max_output_tokens must be a number');
  const out: Json = { model: upstreamModel, max_tokens: maxTokens };
  if (system.length > 0) out.system = compact(system);
  out.messages = turns.map((turn) => ({ role: turn.role, content: compact(turn.content) }));

  if (given(body.temperature)) out.temperature = anthropicTemperature(body.temperature);
  if (given(body.top_p)) {
    if (typeof body.top_p !== 'number') throw new TranslationError('top_p', 'top_p must be a number');
    out.top_p = body.top_p;
  }
  if (body.stream === true) out.stream = true;

  const tools = given(body.tools) ? translateTools(body.tools, dropped) : [];
  if (tools.length > 0) out.tools = tools;
  const toolChoice = anthropicToolChoice(tools, given(body.tool_choice) ? translateToolChoice(body.tool_choice) : undefined, body.parallel_tool_calls);
  if (toolChoice !== undefined) out.tool_choice = toolChoice;

  if (given(body.user)) {
    if (typeof body.user !== 'string') throw new TranslationError('user', 'user must be a string');
    out.metadata = { user_id: body.user };
  }

  return { body: out, dropped: [...dropped] };
}

export const responsesToMessages: Translator = {
  from: 'responses',
  to: 'messages',
  request: translateRequest,
  response: translateResponse,
  error: (status, body) => toOpenAIError(status, body),
  stream: () => new ResponsesStream(),
};
