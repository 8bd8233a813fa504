import type { FastifyRequest } from 'fastify';
import { parse } from 'lossless-json';
import { ApiError, echo } from '../errors.js';
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
  throw new ApiError('invalid_request', `The request body names the field '${echo(key)}' twice; send each field once.`);
}

/**
 * What the parser does not check in `text` (valid JSON): how deep it nests, the first key an
 * object names twice (the parser reports only duplicates whose values differ; the contract
 * refuses every one), and whether every number is an integer of at most 15 digits with no
 * fraction or exponent, which JavaScript's own JSON.parse reads exactly. One pass over the text.
 */
function inspect(text: string): { depth: number; duplicateKey: string | undefined; plainNumbers: boolean } {
  const objects: (Set<string> | undefined)[] = [];
  let depth = 0;
  let expectKey = false;
  let plainNumbers = true;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      let end = i + 1;
      while (text.charCodeAt(end) !== 0x22) end += text.charCodeAt(end) === 0x5c ? 2 : 1;
      if (expectKey) {
        const key = JSON.parse(text.slice(i, end + 1)) as string;
        const keys = objects.at(-1)!;
        if (keys.has(key)) return { depth, duplicateKey: key, plainNumbers };
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      objects.push(c === 0x7b ? new Set() : undefined);
      depth = Math.max(depth, objects.length);
      expectKey = c === 0x7b;
    } else if (c === 0x7d || c === 0x5d) {
      objects.pop();
      expectKey = false;
    } else if (c === 0x2c) {
      expectKey = objects.at(-1) !== undefined;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      // A number: a sign, digits, and in JSON nothing else unless it has a fraction or exponent.
      let end = c === 0x2d ? i + 1 : i;
      while (end < text.length && text.charCodeAt(end) >= 0x30 && text.charCodeAt(end) <= 0x39) end++;
      const next = text.charCodeAt(end);
      if (end - i > 15 + (c === 0x2d ? 1 : 0) || next === 0x2e || next === 0x65 || next === 0x45) plainNumbers = false;
      i = end - 1;
    }
  }
  return { depth, duplicateKey: undefined, plainNumbers };
}

/** `value` (from JSON.parse, every number a plain integer) with each number as a `bigint`. */
function withBigInts(value: unknown): unknown {
  if (typeof value === 'number') return BigInt(value);
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) value[i] = withBigInts(value[i]);
    return value;
  }
  const object = value as Record<string, unknown>;
  for (const key of Object.keys(object)) object[key] = withBigInts(object[key]);
  return object;
}

// What JSON.parse gives for text that is not JSON: the strict parser then says what is wrong.
const NOT_JSON = Symbol('not JSON');

const tooDeep = () => new ApiError('invalid_request', `The request body nests deeper than ${MAX_DEPTH} levels.`);

/**
 * RFC 9110 section 8.4.1: a body in a content coding the service does not decode (gzip, say) is
 * a 415 that says which it takes (section 12.5.3: `Accept-Encoding` on the 415). Bodies are at
 * most 16 KiB: compressing them saves a client little, and decoding them would let a small body
 * take much memory.
 */
function refuseContentCoding(request: FastifyRequest): void {
  const coding = request.headers['content-encoding'];
  if (coding === undefined || /^\s*identity\s*$/i.test(coding)) return;
  throw new ApiError(
    'unsupported_media_type',
    `The request body must not be content-encoded (Content-Encoding: ${echo(coding)}); send the JSON as it is, without a Content-Encoding header.`,
    { 'accept-encoding': 'identity' },
  );
}

/**
 * Fastify content-type parser for `application/json`: no content coding, strict UTF-8, strict
 * JSON, no duplicate keys, every integer exact. Errors are the contract's 400 and 415 bodies.
 */
export function parseJsonBody(request: FastifyRequest, body: Buffer): unknown {
  refuseContentCoding(request);
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
  // RFC 8259 section 8.1: JSON text sent over a network has no byte order mark.
  if (text.charCodeAt(0) === 0xfeff) {
    throw new ApiError('invalid_request', 'The request body starts with a byte order mark; send JSON without one.');
  }
  // JSON.parse reads valid JSON whose numbers are all plain integers exactly, and then is the
  // reader; any other text goes through the strict parser, which also words every error.
  let native: unknown = NOT_JSON;
  try {
    native = JSON.parse(text);
  } catch {
    // Read again below, by the strict parser.
  }
  let shape = native === NOT_JSON ? undefined : inspect(text);
  if (shape?.plainNumbers && shape.depth <= MAX_DEPTH && shape.duplicateKey === undefined) return withBigInts(native);
  let value: unknown;
  try {
    value = parse(text, null, { parseNumber, onDuplicateKey: rejectDuplicateKey });
  } catch (error) {
    if (error instanceof ApiError) throw error;
    // The recursive parser runs out of stack only on input nested thousands deep.
    if (error instanceof RangeError) throw tooDeep();
    // The parser quotes what it read (a whole number, say): each quote is cut like any echo.
    const problem = (error as Error).message.replace(/'([^']*)'/g, (_, quoted: string) => `'${echo(quoted)}'`);
    throw new ApiError('invalid_request', `The request body is not valid JSON: ${problem}.`);
  }
  shape ??= inspect(text);
  if (shape.depth > MAX_DEPTH) throw tooDeep();
  if (shape.duplicateKey !== undefined) rejectDuplicateKey({ key: shape.duplicateKey });
  return value;
}
