// Reading clients' and providers' JSON defensively: any field may be missing, null or of any type.
import type { Json } from './types.ts';

export function isObject(value: unknown): value is Json {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

/** An optional parameter sent as `null` is taken as not given (OpenAI's rule, and Anthropic's SDKs send none). */
export function given(value: unknown): boolean {
  return value !== undefined && value !== null;
}

/** A token count as a provider reports it: a finite number, else 0. */
export function count(value: unknown): number {
  return typeof value === 'number' && Number.isFinite(value) ? value : 0;
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}

/** A client's value in an error message: never throws, whatever the value (an object whose toString is not a function). */
export function describeValue(value: unknown): string {
  if (typeof value === 'string') return value;
  try {
    return JSON.stringify(value) ?? typeof value;
  } catch {
    return typeof value;
  }
}
