// Every field of a zod schema, found by walking the schema itself: a test that must try something
// in every field of a resource (a secret canary, a hostile value) covers a field added later
// without being edited. Only the schema's structure is read (zod's `_zod.def`), never its messages.
import type { z } from 'zod';

export type FieldPath = (string | number)[];

type Def = {
  type: string;
  shape?: Record<string, unknown>;
  innerType?: unknown;
  element?: unknown;
  valueType?: unknown;
  in?: unknown;
  out?: unknown;
  options?: unknown[];
};
const defOf = (schema: unknown): Def | undefined => (schema as { _zod?: { def?: Def } } | undefined)?._zod?.def;

/**
 * The path of every leaf (a value that is not a mapping or a list) the schema accepts: each
 * option of a union, one item of a list (index 0), one entry of a record (named `recordKey`).
 */
export function schemaLeaves(schema: z.ZodType, recordKey = 'x-field'): FieldPath[] {
  const found = new Map<string, FieldPath>();
  const walk = (node: unknown, path: FieldPath, depth: number): void => {
    const def = defOf(node);
    if (!def || depth > 40) return;
    switch (def.type) {
      case 'optional':
      case 'nullable':
      case 'default':
      case 'prefault':
      case 'readonly':
      case 'catch':
        return walk(def.innerType, path, depth + 1);
      case 'pipe':
        // z.preprocess(fn, schema) is a pipe from a transform to the schema.
        return walk(defOf(def.out)?.type === 'transform' ? def.in : def.out, path, depth + 1);
      case 'union':
        for (const option of def.options ?? []) walk(option, path, depth + 1);
        return;
      case 'object':
        for (const [key, value] of Object.entries(def.shape ?? {})) walk(value, [...path, key], depth + 1);
        return;
      case 'array':
        return walk(def.element, [...path, 0], depth + 1);
      case 'record':
        return walk(def.valueType, [...path, recordKey], depth + 1);
      default:
        found.set(JSON.stringify(path), path);
    }
  };
  walk(schema, [], 0);
  return [...found.values()];
}

/** A deep copy of `document` with `value` at `path` (the mappings and lists on the way made as needed). */
export function withValueAt(document: Record<string, unknown>, path: FieldPath, value: unknown): Record<string, unknown> {
  const copy = structuredClone(document);
  let node: Record<string | number, unknown> = copy;
  path.forEach((part, index) => {
    if (index === path.length - 1) {
      node[part] = value;
      return;
    }
    const next = node[part];
    if (next === null || typeof next !== 'object') node[part] = typeof path[index + 1] === 'number' ? [] : {};
    node = node[part] as Record<string | number, unknown>;
  });
  return copy;
}
