import { createHash } from 'node:crypto';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { ApiError } from '../errors.js';
import type { IdempotencyClaim } from '../store/store.js';

/** How long a first response is replayed (docs/api.md#safe-retries-idempotency-key). */
export const IDEMPOTENCY_TTL_MS = 24 * 60 * 60 * 1000;

const BARE = /^[\x21-\x7e]{1,255}$/;
// RFC 8941 sf-string, restricted to visible characters: the contract's key has no space.
const QUOTED = /^"((?:[\x21\x23-\x5b\x5d-\x7e]|\\["\\])*)"$/;

const malformed = () =>
  new ApiError(
    'invalid_request',
    "Header 'Idempotency-Key' must be 1 to 255 visible ASCII characters, bare or as a quoted string; send it once.",
  );

/**
 * The key an `Idempotency-Key` header names, undefined when there is none. The IETF draft's
 * quoted form (`"8e03…"`) and the bare form most clients send name the same key.
 *
 * @example parseIdempotencyKey('"a\\"b"') // 'a"b'
 * @throws ApiError 400 when the header is empty, malformed or repeated.
 */
export function parseIdempotencyKey(header: string | string[] | undefined): string | undefined {
  if (header === undefined) return undefined;
  if (typeof header !== 'string') throw malformed();
  let key = header;
  if (header.startsWith('"')) {
    const quoted = QUOTED.exec(header);
    if (!quoted) throw malformed();
    key = quoted[1]!.replace(/\\(.)/g, '$1');
  }
  if (!BARE.test(key)) throw malformed();
  return key;
}

/** JSON text of `value` with object keys sorted and numbers as the parser read them. */
function canonical(value: unknown): string {
  if (typeof value === 'bigint') return value.toString();
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.keys(value)
      .sort()
      .map((key) => `${JSON.stringify(key)}:${canonical((value as Record<string, unknown>)[key])}`);
    return `{${entries.join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * SHA-256 of the body as a JSON value: key order and white space do not matter, and `7`, `7.0`
 * and `7e0` are one number, as the body parser reads them.
 */
export function fingerprint(body: unknown): Buffer {
  return createHash('sha256').update(canonical(body)).digest();
}

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's idempotency key and body fingerprint, when it sent `Idempotency-Key`. */
    idempotency?: { key: string; fingerprint: Buffer };
  }
}

/**
 * `preValidation` hook: reads `Idempotency-Key` and fingerprints the body as sent, before
 * validation fills in defaults. A callback hook: it costs no promise.
 */
export function readIdempotencyKey(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) {
  let key: string | undefined;
  try {
    key = parseIdempotencyKey(request.headers['idempotency-key']);
  } catch (error) {
    return done(error as Error);
  }
  if (key !== undefined) request.idempotency = { key, fingerprint: fingerprint(request.body) };
  done();
}

/**
 * Keys whose first request this instance is processing: a retry that arrives meanwhile is a 409
 * without a trip to the database. The store's own lock covers requests on other instances.
 */
export class InFlight {
  readonly #keys = new Set<string>();

  /** Runs `work` holding (API key, idempotency key); throws 409 when it is already held. */
  async hold<T>(apiKeyId: number, key: string, work: () => Promise<T>): Promise<T> {
    const id = `${apiKeyId}:${key}`;
    if (this.#keys.has(id)) throw inFlight();
    this.#keys.add(id);
    try {
      return await work();
    } finally {
      this.#keys.delete(id);
    }
  }
}

export const inFlight = () =>
  new ApiError(
    'idempotency_conflict',
    "A request with this 'Idempotency-Key' is still being processed; retry after it has been answered.",
    { 'retry-after': '1' },
  );

export const mismatch = () =>
  new ApiError(
    'idempotency_mismatch',
    "This 'Idempotency-Key' was used with a different request body; use a new key for a new animal.",
  );

/** The claim a create with `key` makes at `now`, the request's reading of the service's clock. */
export function claimFor(
  apiKeyId: number,
  idempotency: { key: string; fingerprint: Buffer },
  now: number,
): IdempotencyClaim {
  return { apiKeyId, ...idempotency, now, expiresAt: now + IDEMPOTENCY_TTL_MS };
}
