import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import { systemClock, type Clock } from '../clock.js';
import { ApiError } from '../errors.js';
import { hashKey, sameHash } from '../keys/keys.js';
import { scopes, type Scope } from '../schemas.js';
import type { KeyMemory } from '../keys/memory.js';
import type { ActiveKey } from '../store/store.js';
import { clientAddress } from './addresses.js';
import { type RateFields, type RateLimits, withFields } from './rate-limit.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The id of the API key that authenticated this request. */
    apiKeyId?: number;
    /**
     * The service clock's reading (unix ms) this request is judged at, read once by its key
     * check: the key's expiry, the rate-limit window, the key's last use, and after it getPet's
     * sunset and an idempotent create's expiry all use it.
     */
    now: number;
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

/** Who may make a request: the API key check and the rate limits. */
export interface Gate {
  /**
   * Admits a request with an active, unexpired key that holds `scope`, within its rate limit,
   * or rejects with the 401, 403 or 429 to answer. A refused key from an address that sent too
   * many gets 429 instead of 401; a valid key is never refused for what its address sent. A
   * valid key is counted before its scope is checked: its 403 carries its RateLimit fields, and
   * past its limit it gets 429 whatever the scope. `address` is asked only for a 401 or 429.
   * `now` is the request's reading of the service's clock.
   */
  admit(
    address: () => string,
    authorization: string | undefined,
    connection: object,
    scope: Scope,
    now: number,
  ): Promise<Admission>;
  /**
   * What `admit` would answer, at once, when the key memory holds the key (keys/memory.ts)
   * or no credentials were sent: the admission, or the 401, 403 or 429 thrown. Undefined when
   * only `admit` can tell; nothing is counted then.
   */
  admitRemembered(
    address: () => string,
    authorization: string | undefined,
    connection: object,
    scope: Scope,
    now: number,
  ): Admission | undefined;
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

export function createGate(keys: KeyMemory, limits: RateLimits): Gate {
  // The last credentials each connection sent: a client sends the same header on every request
  // of a connection, so it is read and hashed once. The header is compared in constant time, as
  // a key would be.
  const lastSent = new WeakMap<object, Credentials>();
  const credentialsOf = (address: () => string, authorization: string | undefined, connection: object): Credentials => {
    const last = lastSent.get(connection);
    if (last && authorization !== undefined && sameText(last.authorization, authorization)) return last;
    let token: string;
    try {
      token = readToken(authorization);
    } catch (refusal) {
      // No usable credentials: not counted as a refused key, but the 401 shows the address's
      // budget of them (docs/api.md#limits).
      throw withFields(refusal as ApiError, limits.peekRefused(address()));
    }
    const credentials = { authorization: authorization!, token, hash: hashKey(token) };
    lastSent.set(connection, credentials);
    return credentials;
  };

  // Counted, then the scope checked: a 403 is an answer to the key like any other, with its
  // RateLimit fields, and a key past its limit gets 429 whatever it asks.
  const admitKey = (key: ActiveKey, scope: Scope, now: number): Admission => {
    const rateFields = limits.admitKey(key.id, now);
    if (!key.scopes.includes(scope)) throw withFields(forbidden[scope], rateFields);
    keys.noteKeyUse(key.id, now);
    return { apiKeyId: key.id, rateFields };
  };

  // By the service's clock: from that instant on, on every instance (docs/keys.md#expiry).
  const expired = (key: ActiveKey, now: number) => key.expiresAt !== null && key.expiresAt <= now;

  async function lookUp(address: () => string, token: string, hash: Buffer, now: number): Promise<ActiveKey> {
    const found = B64TOKEN.test(token) ? await keys.findActiveKey(hash) : undefined;
    const key = found && sameHash(found.hash, hash) ? found : undefined;
    if (!key || expired(key, now)) {
      // Counted against the address: past its limit this throws the 429 instead.
      const fields = limits.noteRefusedKey(address());
      throw withFields(key ? expiredKey(key) : refuse('The API key is not valid or has been revoked.', true), fields);
    }
    return key;
  }

  const remembered = (hash: Buffer, now: number) => {
    const key = keys.rememberedKey(hash);
    return key && sameHash(key.hash, hash) && !expired(key, now) ? key : undefined;
  };

  return {
    async admit(address, authorization, connection, scope, now) {
      const { token, hash } = credentialsOf(address, authorization, connection);
      const key = remembered(hash, now) ?? (await lookUp(address, token, hash, now));
      return admitKey(key, scope, now);
    },
    admitRemembered(address, authorization, connection, scope, now) {
      const key = remembered(credentialsOf(address, authorization, connection).hash, now);
      return key && admitKey(key, scope, now);
    },
  };
}

/**
 * The `onRequest` hook of a route that needs `scope`: it admits a request only with an active,
 * unexpired API key that holds the scope, within its rate limit. It runs before the body is read
 * or validated, so an unauthenticated request is a 401 and an out-of-scope one a 403 whatever
 * else is wrong with it.
 *
 * @example
 * const needs = authenticate(gate, clock);
 * app.get('/v1/pets', { onRequest: needs('pets:read') }, listPets);
 */
export function authenticate(gate: Gate, clock: Clock = systemClock): (scope: Scope) => onRequestHookHandler {
  const admitted = (request: FastifyRequest, reply: FastifyReply, { apiKeyId, rateFields }: Admission) => {
    request.apiKeyId = apiKeyId;
    if (rateFields) reply.headers(rateFields);
  };
  // A callback hook: a remembered key is admitted with no promise made.
  return (scope) =>
    function authenticateRequest(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction) {
      const { authorization } = request.headers;
      const address = () => clientAddress(request);
      // The request's one reading of the service's clock.
      const now = (request.now = clock.now());
      let admission: Admission | undefined;
      try {
        admission = gate.admitRemembered(address, authorization, request.raw.socket, scope, now);
      } catch (refusal) {
        return done(refusal as Error);
      }
      if (admission) {
        admitted(request, reply, admission);
        return done();
      }
      gate.admit(address, authorization, request.raw.socket, scope, now).then((found) => {
        admitted(request, reply, found);
        done();
      }, done);
    };
}

export interface AuthOptions {
  /** The keys found and used lately (made in app.ts, which shares it with the routes). */
  keys: KeyMemory;
  clock: Clock;
  /** The per-key and refused-key limits (made in app.ts, which shares them with the parser's answers). */
  limits: RateLimits;
}

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * The `onRequest` hook of a route that needs `scope`: see authenticate.
     *
     * @example app.get('/v1/pets', { onRequest: app.authenticate('pets:read') }, listPets);
     */
    authenticate(scope: Scope): onRequestHookHandler;
  }
}

/** Bearer API keys, their scopes and the rate limits, for the routes that ask with `app.authenticate(scope)`. */
export const auth = fp<AuthOptions>(
  async (app, { keys, clock, limits }) => {
    app.decorateRequest('apiKeyId', undefined);
    app.decorateRequest('now', 0);
    app.decorate('authenticate', authenticate(createGate(keys, limits), clock));
    // After the routes' last requests, before the store closes (server.ts): the hits and the
    // keys' uses are written.
    app.addHook('onClose', async () => void (await Promise.all([limits.close(), keys.close()])));
  },
  { name: 'petstore-auth' },
);
