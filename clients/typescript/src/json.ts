import { isLosslessNumber, parse, stringify } from 'lossless-json';
import { int64Properties } from './schema.js';

const INT64 = new Set<string>(int64Properties);

/**
 * Parses a response body keeping int64 exact: the properties the API document types as int64
 * become `bigint` (JSON.parse would round anything past 2^53), every other number a `number`.
 */
export function parseBody(text: string): unknown {
  return parse(text, (key, value) => {
    if (!isLosslessNumber(value)) return value;
    return INT64.has(key) ? BigInt(value.toString()) : value.valueOf();
  });
}

/** Serializes a request body; a `bigint` is written as its exact digits. */
export function serializeBody(body: unknown): string {
  const text = stringify(body);
  if (text === undefined) throw new TypeError('The request body cannot be serialized as JSON.');
  return text;
}
