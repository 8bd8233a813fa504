import type { FastifyRequest } from 'fastify';
import { parse } from 'lossless-json';
import { ApiError } from '../errors.js';
import { INT64_MAX, INT64_MIN } from '../schemas.js';

const MAX_DEPTH = 32;
const NUMBER = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/**
 * The exact integer a JSON number denotes, when it denotes one inside int64.
 * As in JSON Schema, `7`, `7.0`, `7e2` and `1.5e1` are integers; `1.5` is not.
 *
 * @example toInt64('9223372036854775807') // 9223372036854775807n
 * @example toInt64('1e400') // undefined (outside int64, computed without building it)
 */
export function toInt64(text: string): bigint | undefined {
  const match = NUMBER.exec(text);
  if (!match) return undefined;
  const [, sign, whole, fraction = '', exponent = '0'] = match;
  let digits = (whole! + fraction).replace(/^0+/, '');
  if (digits === '') return 0n;
  let scale = Number(exponent) - fraction.length;
  while (scale < 0 && digits.endsWith('0')) {
    digits = digits.slice(0, -1);
    scale += 1;
  }
  if (scale < 0 || digits.length + scale > 19) return undefined;
  const value = BigInt(sign + digits + '0'.repeat(scale));
  return value >= INT64_MIN && value <= INT64_MAX ? value : undefined;
}

/** Integers inside int64 become `bigint`; any other number stays a `number`, to fail the schema. */
const parseNumber = (text: string): bigint | number => toInt64(text) ?? Number(text);

function rejectDuplicateKey({ key }: { key: string }): never {
  throw new ApiError('invalid_request', `The request body names the field '${key}' twice; send each field once.`);
}

function nestingDepth(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) deepest = Math.max(deepest, ++depth);
    else if (c === 0x7d || c === 0x5d) depth--;
  }
  return deepest;
}

/**
 * Fastify content-type parser for `application/json`: strict UTF-8, strict JSON, no duplicate
 * keys, every integer exact. Errors are the contract's 400 and 415 bodies.
 */
export function parseJsonBody(request: FastifyRequest, body: Buffer): unknown {
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)"?/i.exec(request.headers['content-type'] ?? '')?.[1];
  if (charset !== undefined && charset.toLowerCase() !== 'utf-8') {
    throw new ApiError(
      'unsupported_media_type',
      "The request body must be UTF-8 JSON: send 'Content-Type: application/json' with no other charset.",
    );
  }
  if (body.length === 0) throw new ApiError('invalid_request', 'The request body is empty; send a JSON object.');
  let text: string;
  try {
    text = utf8.decode(body);
  } catch {
    throw new ApiError('invalid_request', 'The request body is not valid UTF-8.');
  }
  if (nestingDepth(text) > MAX_DEPTH) {
    throw new ApiError('invalid_request', `The request body nests deeper than ${MAX_DEPTH} levels.`);
  }
  try {
    return parse(text, null, { parseNumber, onDuplicateKey: rejectDuplicateKey });
  } catch (error) {
    if (error instanceof ApiError) throw error;
    throw new ApiError('invalid_request', `The request body is not valid JSON: ${(error as Error).message}.`);
  }
}
