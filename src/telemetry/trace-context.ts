// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a caller sends, read
// strictly, and the one an upstream request carries. Pure: anything a client sends is either a
// valid parent or ignored, never an error.

/** A caller's span, as its `traceparent` names it. */
export interface RemoteParent {
  /** 32 lower-case hex digits, not all zero. */
  readonly traceId: string;
  /** 16 lower-case hex digits, not all zero. */
  readonly spanId: string;
  /** The caller's sampling decision (flags bit 0). */
  readonly sampled: boolean;
}

/** `version-traceid-parentid-flags`: the first 55 characters of any version. */
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})/;
const ZERO_TRACE = '0'.repeat(32);
const ZERO_SPAN = '0'.repeat(16);
/** Longer than any `traceparent` a current version could need: read no further. */
const MAX_TRACEPARENT = 512;
/** The W3C limit on `tracestate`. */
export const MAX_TRACESTATE = 512;

/**
 * The parent a `traceparent` header names, or undefined when it is absent or invalid (then the
 * request starts a new trace and its `tracestate` is ignored, as the spec asks). Version 00 is
 * exactly 55 characters; a later version may append fields after a `-`; version ff is invalid.
 * Two headers (Node joins them with ", ") are invalid too.
 */
export function parseTraceparent(value: string | string[] | undefined): RemoteParent | undefined {
  if (typeof value !== 'string' || value.length < 55 || value.length > MAX_TRACEPARENT) return undefined;
  const match = TRACEPARENT.exec(value);
  if (!match) return undefined;
  const [, version, traceId, spanId, flags] = match as unknown as [string, string, string, string, string];
  if (version === 'ff') return undefined;
  if (version === '00' ? value.length !== 55 : value.length > 55 && value[55] !== '-') return undefined;
  if (traceId === ZERO_TRACE || spanId === ZERO_SPAN) return undefined;
  return { traceId, spanId, sampled: (Number.parseInt(flags, 16) & 1) === 1 };
}

/** The `traceparent` header of a span (version 00). */
export function formatTraceparent(traceId: string, spanId: string, sampled: boolean): string {
  return `00-${traceId}-${spanId}-${sampled ? '01' : '00'}`;
}
