import type { IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import { systemClock, type Clock } from '../clock.js';
import { ApiError } from '../errors.js';
import { hashKey, sameHash, scopes, type Scope } from '../keys/keys.js';
import type { ActiveKey, Store } from '../store/store.js';
import { clientAddress, type RateFields, type RateLimits } from './rate-limit.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The id of the API key that authenticated this request. */
    apiKeyId?: number;
  }
}

// RFC 9110 auth-scheme token, then RFC 6750 b64token.
const CREDENTIALS = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+)(?: +(.*))?$/;
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;
const CHALLENGE = 'Bearer realm="petstore"';

function refuse(message: string, invalidToken: boolean): ApiError {
  // RFC 6750 section 3: error="invalid_token" only when a token was sent and refused.
  const challenge = invalidToken ? `${CHALLENGE}, error="invalid_token"` : CHALLENGE;
  return new ApiError('unauthorized', message, { 'www-authenticate': challenge });
}

const expiredKey = (key: ActiveKey) =>
  refuse(`The API key expired at ${new Date(key.expiresAt!).toISOString()}; use a new key.`, true);

// RFC 6750 section 3.1: a valid token without the scope the request needs. One per scope, made once.
const forbidden = Object.fromEntries(
  scopes.map((scope) => [
    scope,
    new ApiError('forbidden', `This API key does not hold the scope ${scope} that this request needs.`, {
      'www-authenticate': `${CHALLENGE}, error="insufficient_scope", scope="${scope}"`,
    }),
  ]),
) as Record<Scope, ApiError>;

/** The token of `Authorization: Bearer <token>`; throws the contract's 401 for anything else. */
function readToken(header: string | undefined): string {
  if (header === undefined || header === '') {
    throw refuse("Send an API key in the Authorization header as 'Bearer <key>'.", false);
  }
  const match = CREDENTIALS.exec(header);
  if (!match || match[1]!.toLowerCase() !== 'bearer') {
    throw refuse("The Authorization header must use the Bearer scheme: 'Bearer <key>'.", false);
  }
  const token = (match[2] ?? '').trim();
  if (token === '') throw refuse("The Authorization header has no key after 'Bearer'.", false);
  return token;
}

/** A request let in: the key that authenticated it and the RateLimit fields its answer carries. */
export interface Admission {
  apiKeyId: number;
  rateFields: RateFields;
}

/** Who may make a request: the API key check and the rate limits, for every way a request comes in. */
export interface Gate {
  /**
   * Admits a request with an active, unexpired key that holds `scope`, within its rate limit,
   * or rejects with the 401, 403 or 429 to answer. A refused key from an address that sent too
   * many gets 429 instead of 401; a valid key is never refused for what its address sent.
   */
  admit(address: string, authorization: string | undefined, connection: object, scope: Scope): Promise<Admission>;
  /**
   * The id of the key in `authorization` when the store remembers it as active and it holds
   * `scope`; undefined when only `admit` can tell. Checks without counting anything.
   */
  rememberedKey(authorization: string | undefined, connection: object, scope: Scope): number | undefined;
  /** Counts a request by a key known to be active and holding the scope, and notes its use, as `admit` does. */
  admitKey(apiKeyId: number): Admission;
}

/** Whether two strings are equal, in time that depends on their length only. */
function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let difference = 0;
  for (let i = 0; i < a.length; i++) difference |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return difference === 0;
}

interface Credentials {
  authorization: string;
  token: string;
  hash: Buffer;
}

export function createGate(store: Store, limits: RateLimits, clock: Clock = systemClock): Gate {
  // The last credentials each connection sent: a client sends the same header on every request
  // of a connection, so it is read and hashed once. The header is compared in constant time, as
  // a key would be.
  const lastSent = new WeakMap<object, Credentials>();
  const credentialsOf = (authorization: string | undefined, connection: object): Credentials => {
    const last = lastSent.get(connection);
    if (last && authorization !== undefined && sameText(last.authorization, authorization)) return last;
    const token = readToken(authorization);
    const credentials = { authorization: authorization!, token, hash: hashKey(token) };
    lastSent.set(connection, credentials);
    return credentials;
  };

  const admitKey = (apiKeyId: number, now = clock.now()): Admission => {
    store.memory.noteKeyUse(apiKeyId, now);
    return { apiKeyId, rateFields: limits.admitKey(apiKeyId, now) };
  };

  // By the service's clock: from that instant on, on every instance (CONTRACT.md expiry).
  const expired = (key: ActiveKey, now: number) => key.expiresAt !== null && key.expiresAt <= now;

  const permit = (key: ActiveKey, scope: Scope) => {
    if (!key.scopes.includes(scope)) throw forbidden[scope];
    return key.id;
  };

  async function lookUp(address: string, token: string, hash: Buffer): Promise<ActiveKey> {
    const found = B64TOKEN.test(token) ? await store.findActiveKey(hash) : undefined;
    const key = found && sameHash(found.hash, hash) ? found : undefined;
    if (!key || expired(key, clock.now())) {
      throw (
        limits.noteRefusedKey(address) ??
        (key ? expiredKey(key) : refuse('The API key is not valid or has been revoked.', true))
      );
    }
    return key;
  }

  const remembered = (hash: Buffer, now: number) => {
    const key = store.memory.rememberedKey(hash);
    return key && sameHash(key.hash, hash) && !expired(key, now) ? key : undefined;
  };

  return {
    async admit(address, authorization, connection, scope) {
      const { token, hash } = credentialsOf(authorization, connection);
      const key = remembered(hash, clock.now()) ?? (await lookUp(address, token, hash));
      return admitKey(permit(key, scope));
    },
    rememberedKey(authorization, connection, scope) {
      let credentials: Credentials;
      try {
        credentials = credentialsOf(authorization, connection);
      } catch {
        return undefined;
      }
      const key = remembered(credentials.hash, clock.now());
      return key?.scopes.includes(scope) ? key.id : undefined;
    },
    admitKey,
  };
}

const REFUSED = Symbol('refused');

type Refused = IncomingMessage & { [REFUSED]?: unknown };

/**
 * Leaves on `request` the refusal (a 429) of a step before Fastify that already counted the
 * request (see page-cache.ts), so the key is not counted twice: the route answers with it.
 */
export function holdRefusal(request: IncomingMessage, refusal: unknown): void {
  (request as Refused)[REFUSED] = refusal;
}

/**
 * The `onRequest` hook of a route that needs `scope`: it admits a request only with an active,
 * unexpired API key that holds the scope, within its rate limit. It runs before the body is read
 * or validated, so an unauthenticated request is a 401 and an out-of-scope one a 403 whatever
 * else is wrong with it.
 *
 * @example
 * const needs = authenticate(gate);
 * app.get('/v1/pets', { onRequest: needs('pets:read') }, listPets);
 */
export function authenticate(gate: Gate): (scope: Scope) => onRequestHookHandler {
  return (scope) =>
    async function authenticateRequest(request: FastifyRequest, reply: FastifyReply) {
      const refusal = (request.raw as Refused)[REFUSED];
      if (refusal !== undefined) throw refusal;
      const { apiKeyId, rateFields } = await gate.admit(
        clientAddress(request),
        request.headers.authorization,
        request.raw.socket,
        scope,
      );
      request.apiKeyId = apiKeyId;
      if (rateFields) reply.headers(rateFields);
    };
}
