// Anthropic Messages in front, Amazon Bedrock's Converse behind: a `POST /v1/messages` body
// rewritten as a Converse request, and Bedrock's answer (JSON, event stream or error) rewritten as an
// Anthropic message. Chat Completions and Responses clients reach Converse through this translator
// composed with theirs. A parameter Converse cannot honour is refused with a 400 naming it when
// ignoring it would change what the client gets, and dropped (and named) when it is only a hint.
//
// The request body also carries `model` and `stream`, which are not Converse's: Converse takes the
// model in the path and streams by another operation (ConverseStream), so the provider reads both
// and removes them before sending. Bytes (images, documents, redacted reasoning) are base64 strings,
// as Converse's JSON carries blobs.
//
// Converse serves many model families, and what goes beyond its common fields depends on the
// family: Claude reads `top_k` and `thinking` from additionalModelRequestFields (Bedrock's documented
// form), Nova reads `inferenceConfig.topK` there, and only Claude and Nova take cache points. A model
// named by an ARN that names no model (an application inference profile, a provisioned model) is
// sent what Claude would be: its family is unknown, and Bedrock answers for what it cannot take.
import { TranslationError, type Json, type TranslatedRequest, type Translator } from './types.ts';
import { given, isObject, describeValue } from './json.ts';
import { ConverseStreamToMessages, anthropicErrorFromBedrock, anthropicStop, anthropicUsage, messageId, toolId } from './converse-to-messages-stream.ts';


function unsupported(param: string, what: string): TranslationError {
  return new TranslationError(param, `${what} is not supported when routed to a Bedrock model`);
}

/** Accepted and not sent: no Converse equivalent, and leaving them out only loses a hint. */
const DROPPED = new Set(['service_tier', 'container']);

/** The top-level keys translated below (`thinking`, `top_k` and `mcp_servers` are judged by value); anything else is refused as unknown. */
const HANDLED = new Set(['model', 'messages', 'max_tokens', 'system', 'stop_sequences', 'temperature', 'top_p', 'stream', 'metadata', 'tools', 'tool_choice']);

/** Keys of a client tool that only tune how Anthropic serves it; without them the tool is offered and called the same way. */
const TOOL_HINTS = new Set(['defer_loading', 'eager_input_streaming', 'input_examples', 'allowed_callers']);

/** Converse's image formats (ImageFormat) by Anthropic's media types. */
const IMAGE_FORMATS = new Map([
  ['image/jpeg', 'jpeg'],
  ['image/png', 'png'],
  ['image/gif', 'gif'],
  ['image/webp', 'webp'],
]);

/** Converse's document formats (DocumentFormat) by media type. */
const DOCUMENT_FORMATS = new Map([
  ['application/pdf', 'pdf'],
  ['text/plain', 'txt'],
  ['text/csv', 'csv'],
  ['text/html', 'html'],
  ['text/markdown', 'md'],
  ['application/msword', 'doc'],
  ['application/vnd.openxmlformats-officedocument.wordprocessingml.document', 'docx'],
  ['application/vnd.ms-excel', 'xls'],
  ['application/vnd.openxmlformats-officedocument.spreadsheetml.sheet', 'xlsx'],
]);

/** Cross-region inference profiles prefix the model id with where they route (`us.anthropic.…`). */
const REGION_PREFIX = /^(?:us|us-gov|eu|apac|jp|au|ca|global)\./;

/** The foundation model id an upstream model name stands for: an ARN's last part, without a cross-region prefix. */
export function bedrockModelId(model: string): string {
  const id = model.startsWith('arn:') ? model.slice(model.lastIndexOf('/') + 1) : model;
  return id.replace(REGION_PREFIX, '');
}

/** What decides the extras a request may carry (see the header). */
type Family = 'anthropic' | 'nova' | 'other' | 'unknown';

function familyOf(model: string): Family {
  const id = bedrockModelId(model);
  if (id.startsWith('anthropic.')) return 'anthropic';
  if (id.startsWith('amazon.nova')) return 'nova';
  // Model ids are `provider.name`; an ARN's `a1b2c3d4` (a profile's or a provisioned model's) is not one.
  return model.startsWith('arn:') && !id.includes('.') ? 'unknown' : 'other';
}

/** One request's translation: the family's rules, what was dropped, and the document names given out. */
class Context {
  readonly dropped: string[] = [];
  readonly family: Family;
  readonly #names = new Set<string>();

  constructor(model: string) {
    this.family = familyOf(model);
  }

  get claudeLike(): boolean {
    return this.family === 'anthropic' || this.family === 'unknown';
  }

  drop(name: string): void {
    if (!this.dropped.includes(name)) this.dropped.push(name);
  }

  /** The cache point that follows a block marked with cache_control, where the family takes them. */
  cachePoint(block: Json): Json[] {
    const control = block.cache_control;
    if (!given(control)) return [];
    if (this.family === 'other') {
      this.drop('cache_control');
      return [];
    }
    const point: Json = { type: 'default' };
    if (isObject(control) && (control.ttl === '5m' || control.ttl === '1h')) point.ttl = control.ttl;
    return [{ cachePoint: point }];
  }

  /**
   * A document's name: Converse requires one, of (ASCII) letters and digits, single spaces, hyphens,
   * parentheses and brackets only, and unique; the model may read it, so the title is used when there is one.
   */
  documentName(title: unknown): string {
    const clean = typeof title === 'string' ? title.replace(/[^A-Za-z0-9\s\-()[\]]+/g, ' ').replace(/\s+/g, ' ').trim().slice(0, 200) : '';
    let name = clean === '' ? `document ${this.#names.size + 1}` : clean;
    for (let n = 2; this.#names.has(name); n++) name = `${clean === '' ? 'document' : clean} (${n})`;
    this.#names.add(name);
    return name;
  }
}

function image(block: Json, at: string): Json {
  const source = isObject(block.source) ? block.source : {};
  if (source.type !== 'base64' || typeof source.data !== 'string') {
    // Converse takes an image's bytes or an S3 location; it fetches no URL.
    throw unsupported(`${at}.source`, `an image source of type '${describeValue(source.type)}' (send the image base64-encoded)`);
  }
  const format = typeof source.media_type === 'string' ? IMAGE_FORMATS.get(source.media_type) : undefined;
  if (format === undefined) throw unsupported(`${at}.source.media_type`, `an image of type '${describeValue(source.media_type)}'`);
  return { image: { format, source: { bytes: source.data } } };
}

function documentBlock(block: Json, at: string, context: Context): Json {
  const source = isObject(block.source) ? block.source : {};
  let format: string | undefined;
  let bytes: string;
  if (source.type === 'base64' && typeof source.data === 'string') {
    format = typeof source.media_type === 'string' ? DOCUMENT_FORMATS.get(source.media_type) : undefined;
    if (format === undefined) throw unsupported(`${at}.source.media_type`, `a document of type '${describeValue(source.media_type)}'`);
    bytes = source.data;
  } else if (source.type === 'text' && typeof source.data === 'string') {
    format = 'txt';
    bytes = Buffer.from(source.data, 'utf8').toString('base64');
  } else if (source.type === 'content' && Array.isArray(source.content)) {
    // Anthropic's own chunks matter only to its citations, which are not asked for here.
    const texts = source.content.map((inner: unknown, k) => {
      if (isObject(inner) && inner.type === 'text' && typeof inner.text === 'string') return inner.text;
      throw unsupported(`${at}.source.content[${k}]`, 'a document chunk other than text');
    });
    format = 'txt';
    bytes = Buffer.from(texts.join('\n\n'), 'utf8').toString('base64');
  } else throw unsupported(`${at}.source`, `a document source of type '${describeValue(source.type)}' (send the document base64-encoded)`);
  // Citations come back in Converse's own form, which Anthropic's text blocks cannot carry.
  if (given(block.citations)) context.drop('citations');
  const document: Json = { format, name: context.documentName(block.title), source: { bytes } };
  if (typeof block.context === 'string' && block.context !== '') document.context = block.context;
  return { document };
}

function toolResult(block: Json, at: string, context: Context): Json[] {
  if (typeof block.tool_use_id !== 'string') throw new TranslationError(`${at}.tool_use_id`, 'tool_result needs a tool_use_id');
  const content: Json[] = [];
  let control = block.cache_control;
  if (typeof block.content === 'string') {
    if (block.content !== '') content.push({ text: block.content });
  } else if (Array.isArray(block.content)) {
    block.content.forEach((inner: unknown, k) => {
      const where = `${at}.content[${k}]`;
      if (!isObject(inner)) throw new TranslationError(where, 'a content block must be an object');
      // A tool result's inner blocks take no cache point: it goes after the whole result.
      if (!given(control) && given(inner.cache_control)) control = inner.cache_control;
      if (inner.type === 'text' && typeof inner.text === 'string') content.push({ text: inner.text });
      else if (inner.type === 'image') content.push(image(inner, where));
      else if (inner.type === 'document') content.push(documentBlock(inner, where, context));
      else throw unsupported(where, `a '${describeValue(inner.type)}' block in a tool_result`);
    });
  } else if (given(block.content)) throw new TranslationError(`${at}.content`, 'tool_result content must be a string or an array of blocks');
  const result: Json = { toolUseId: block.tool_use_id, content };
  if (block.is_error === true) {
    // Converse's status is read by Claude and Nova only.
    if (context.family === 'other') context.drop('is_error');
    else result.status = 'error';
  }
  return [{ toolResult: result }, ...context.cachePoint({ cache_control: control })];
}

function userBlock(block: Json, at: string, context: Context): Json[] {
  if (block.type === 'tool_result') return toolResult(block, at, context);
  let out: Json;
  if (block.type === 'text' && typeof block.text === 'string') out = { text: block.text };
  else if (block.type === 'image') out = image(block, at);
  else if (block.type === 'document') out = documentBlock(block, at, context);
  else throw unsupported(at, `a '${describeValue(block.type)}' content block`);
  return [out, ...context.cachePoint(block)];
}

function assistantBlock(block: Json, at: string, context: Context): Json[] {
  let out: Json;
  if (block.type === 'text' && typeof block.text === 'string') out = { text: block.text };
  else if (block.type === 'tool_use') {
    if (typeof block.id !== 'string' || typeof block.name !== 'string') throw new TranslationError(at, 'tool_use needs an id and a name');
    out = { toolUse: { toolUseId: block.id, name: block.name, input: isObject(block.input) ? block.input : {} } };
  } else if (block.type === 'thinking' || block.type === 'redacted_thinking') {
    // Claude's reasoning, signed for Claude: another family has no place for it, and the answer it
    // led to is in the text and tool calls kept.
    if (!context.claudeLike) return [];
    if (block.type === 'redacted_thinking') out = { reasoningContent: { redactedContent: typeof block.data === 'string' ? block.data : '' } };
    else {
      const reasoningText: Json = { text: typeof block.thinking === 'string' ? block.thinking : '' };
      if (typeof block.signature === 'string' && block.signature !== '') reasoningText.signature = block.signature;
      out = { reasoningContent: { reasoningText } };
    }
  } else throw unsupported(at, `a '${describeValue(block.type)}' content block in an assistant message`);
  return [out, ...context.cachePoint(block)];
}

/**
 * The conversation as Converse messages. Converse requires the roles to alternate; Anthropic joins
 * consecutive turns of one role into one, and so does this.
 */
function converseMessages(messages: unknown, context: Context): Json[] {
  if (!Array.isArray(messages)) throw new TranslationError('messages', "'messages' must be an array");
  const out: Json[] = [];
  messages.forEach((message: unknown, i) => {
    const param = `messages[${i}]`;
    if (!isObject(message)) throw new TranslationError(param, 'a message must be an object');
    const { role, content } = message;
    if (role !== 'user' && role !== 'assistant') throw new TranslationError(`${param}.role`, `role must be 'user' or 'assistant', not '${describeValue(role)}'`);
    let blocks: Json[];
    if (typeof content === 'string') blocks = [{ text: content }];
    else if (Array.isArray(content)) {
      blocks = content.flatMap((block: unknown, j) => {
        const at = `${param}.content[${j}]`;
        if (!isObject(block)) throw new TranslationError(at, 'a content block must be an object');
        return role === 'user' ? userBlock(block, at, context) : assistantBlock(block, at, context);
      });
    } else throw new TranslationError(`${param}.content`, 'content must be a string or an array of blocks');
    // A turn that was only reasoning another family cannot read leaves nothing to send.
    if (blocks.length === 0 && Array.isArray(content) && content.length > 0) return;
    const last = out.at(-1);
    if (last !== undefined && last.role === role) (last.content as Json[]).push(...blocks);
    else out.push({ role, content: blocks });
  });
  return out;
}

function systemBlocks(system: unknown, context: Context): Json[] {
  if (typeof system === 'string') return system === '' ? [] : [{ text: system }];
  if (!Array.isArray(system)) throw new TranslationError('system', "'system' must be a string or an array of text blocks");
  return system.flatMap((block: unknown, i) => {
    if (!isObject(block) || block.type !== 'text' || typeof block.text !== 'string') throw new TranslationError(`system[${i}]`, 'system blocks must be text blocks');
    return [{ text: block.text }, ...context.cachePoint(block)];
  });
}

function converseTools(tools: unknown, context: Context): Json[] {
  if (!Array.isArray(tools)) throw new TranslationError('tools', "'tools' must be an array");
  return tools.flatMap((tool: unknown, i) => {
    const param = `tools[${i}]`;
    if (!isObject(tool)) throw new TranslationError(param, 'a tool must be an object');
    // Server tools (web search, bash, code execution, …) run inside Anthropic's API.
    if (given(tool.type) && tool.type !== 'custom') throw unsupported(param, `the server tool '${describeValue(tool.type)}'`);
    if (typeof tool.name !== 'string') throw new TranslationError(`${param}.name`, 'a tool needs a name');
    const spec: Json = { name: tool.name };
    if (typeof tool.description === 'string') spec.description = tool.description;
    spec.inputSchema = { json: isObject(tool.input_schema) ? tool.input_schema : { type: 'object', properties: {} } };
    if (typeof tool.strict === 'boolean') spec.strict = tool.strict;
    for (const key of Object.keys(tool)) if (TOOL_HINTS.has(key) && given(tool[key])) context.drop(key);
    return [{ toolSpec: spec }, ...context.cachePoint(tool)];
  });
}

/** Whether the conversation holds tool calls or results: Converse refuses them without a toolConfig. */
function usesTools(messages: Json[]): boolean {
  return messages.some((message) => (message.content as Json[]).some((block) => isObject(block.toolUse) || isObject(block.toolResult)));
}

/**
 * `tools` and `tool_choice` as Converse's toolConfig, or undefined. Converse has no "none": a model
 * offered no tool calls none, so `none` sends no toolConfig, unless the conversation already holds
 * tool calls (Converse requires the tools then): the tools are sent, and `tool_choice` is named as
 * dropped. `auto` is Converse's default and is not sent (not every model takes a toolChoice).
 */
function toolConfig(body: Json, messages: Json[], context: Context): Json | undefined {
  const tools = given(body.tools) ? converseTools(body.tools, context) : [];
  const offered = tools.some((tool) => isObject(tool.toolSpec));
  let toolChoice: Json | undefined;
  if (given(body.tool_choice)) {
    const choice = body.tool_choice;
    if (!isObject(choice)) throw new TranslationError('tool_choice', "'tool_choice' must be an object");
    if (choice.disable_parallel_tool_use === true) context.drop('disable_parallel_tool_use');
    if (choice.type === 'any' || choice.type === 'tool') {
      if (!offered) throw new TranslationError('tool_choice', 'tool_choice requires a tool call but no tools were given');
      if (choice.type === 'any') toolChoice = { any: {} };
      else if (typeof choice.name === 'string') toolChoice = { tool: { name: choice.name } };
      else throw new TranslationError('tool_choice.name', "tool_choice 'tool' needs a name");
    } else if (choice.type === 'none') {
      if (!offered) return undefined;
      if (!usesTools(messages)) return undefined;
      context.drop('tool_choice');
    } else if (choice.type !== 'auto') throw new TranslationError('tool_choice.type', `unknown tool_choice type '${describeValue(choice.type)}'`);
  }
  if (!offered) return undefined;
  return toolChoice === undefined ? { tools } : { tools, toolChoice };
}

/** `top_k` and `thinking`, where the family reads them (additionalModelRequestFields), else dropped or refused. */
function additionalFields(body: Json, context: Context): Json | undefined {
  const fields: Json = {};
  if (given(body.top_k)) {
    if (context.claudeLike) fields.top_k = body.top_k;
    else if (context.family === 'nova') fields.inferenceConfig = { topK: body.top_k };
    else context.drop('top_k');
  }
  if (given(body.thinking)) {
    const type = isObject(body.thinking) ? body.thinking.type : undefined;
    if (context.claudeLike) fields.thinking = body.thinking;
    // Adaptive thinking lets the model decide whether to think; one that does not is an answer it
    // allows. Asking for thinking outright is not something to ignore.
    else if (type === 'disabled' || type === 'adaptive') context.drop('thinking');
    else throw unsupported('thinking', 'extended thinking on this model');
  }
  return Object.keys(fields).length === 0 ? undefined : fields;
}

function converseRequest(body: Json, upstreamModel: string): TranslatedRequest {
  const context = new Context(upstreamModel);
  // In the body's order, so `dropped` names them as the client wrote them.
  for (const key of Object.keys(body)) {
    if (!given(body[key]) || key === 'thinking' || key === 'top_k') continue;
    if (DROPPED.has(key)) context.drop(key);
    else if (key === 'mcp_servers') {
      if (!Array.isArray(body.mcp_servers) || body.mcp_servers.length > 0) throw unsupported('mcp_servers', 'MCP servers');
      context.drop('mcp_servers');
    } else if (!HANDLED.has(key)) throw new TranslationError(key, `unknown parameter '${key}'`);
  }
  if (given(body.metadata)) {
    if (!isObject(body.metadata)) throw new TranslationError('metadata', "'metadata' must be an object");
    for (const key of Object.keys(body.metadata)) {
      if (key !== 'user_id') throw new TranslationError(`metadata.${key}`, `unknown parameter 'metadata.${key}'`);
    }
    // Converse's requestMetadata only labels invocation logs, under rules of its own: the id is not sent.
    if (given(body.metadata.user_id)) context.drop('metadata.user_id');
  }

  const out: Json = { model: upstreamModel };
  const system = given(body.system) ? systemBlocks(body.system, context) : [];
  const messages = converseMessages(body.messages, context);
  out.messages = messages;
  if (system.length > 0) out.system = system;

  const inference: Json = {};
  if (given(body.max_tokens)) inference.maxTokens = body.max_tokens;
  if (given(body.temperature)) inference.temperature = body.temperature;
  if (given(body.top_p)) inference.topP = body.top_p;
  if (given(body.stop_sequences)) inference.stopSequences = body.stop_sequences;
  if (Object.keys(inference).length > 0) out.inferenceConfig = inference;

  const tools = toolConfig(body, messages, context);
  if (tools !== undefined) out.toolConfig = tools;
  const fields = additionalFields(body, context);
  if (fields !== undefined) out.additionalModelRequestFields = fields;
  // Claude tells which stop sequence matched only when asked; Converse ignores a path the answer lacks.
  if (context.claudeLike && Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0) out.additionalModelResponseFieldPaths = ['/stop_sequence'];
  out.stream = body.stream === true;
  return { body: out, dropped: context.dropped };
}

/** One block of Converse's answer as Anthropic's (none for what a Messages answer has no block for). */
function answerBlock(block: unknown, message: string, n: number): Json[] {
  if (!isObject(block)) return [];
  if (typeof block.text === 'string') return block.text === '' ? [] : [{ type: 'text', text: block.text }];
  if (isObject(block.toolUse)) {
    const call = block.toolUse;
    return [{ type: 'tool_use', id: toolId(call.toolUseId, message, n), name: typeof call.name === 'string' ? call.name : '', input: isObject(call.input) ? call.input : {} }];
  }
  if (isObject(block.reasoningContent)) {
    const reasoning = block.reasoningContent;
    if (typeof reasoning.redactedContent === 'string') return [{ type: 'redacted_thinking', data: reasoning.redactedContent }];
    const text = isObject(reasoning.reasoningText) ? reasoning.reasoningText : {};
    return [{ type: 'thinking', thinking: typeof text.text === 'string' ? text.text : '', signature: typeof text.signature === 'string' ? text.signature : '' }];
  }
  if (isObject(block.citationsContent) && Array.isArray(block.citationsContent.content)) {
    // A cited passage: its text is the answer's; Converse's citations have no Anthropic form here.
    const text = block.citationsContent.content.map((part: unknown) => (isObject(part) && typeof part.text === 'string' ? part.text : '')).join('');
    return text === '' ? [] : [{ type: 'text', text }];
  }
  return [];
}

function converseAnswer(body: Json, model: string): Json {
  const output = isObject(body.output) ? body.output : {};
  const message = isObject(output.message) ? output.message : {};
  const id = messageId();
  const blocks: unknown[] = Array.isArray(message.content) ? message.content : [];
  const content = blocks.flatMap((block, n) => answerBlock(block, id, n));
  const stop = anthropicStop(body.stopReason, body.additionalModelResponseFields);
  return { id, type: 'message', role: 'assistant', model, content, ...stop, usage: anthropicUsage(body.usage) };
}

/**
 * The Messages → Converse translator for one request. `model` names the answer (Converse's name
 * none, and Anthropic's always do); the registry passes the model the client should see.
 */
export function converseTranslation(model: string): Translator {
  return {
    from: 'messages',
    to: 'converse',
    request: converseRequest,
    response: (body) => converseAnswer(body, model),
    error: (status, body) => anthropicErrorFromBedrock(status, body),
    stream: () => new ConverseStreamToMessages(model),
  };
}

/** The same with answers that name no model (`model: ''`); a request is better served by `converseTranslation`. */
export const messagesToConverse: Translator = converseTranslation('');
