import type { FastifyReply, FastifyRequest } from 'fastify';
import { ApiError } from '../errors.js';
import { hashKey, sameHash } from '../keys/keys.js';
import type { Store } from '../store/store.js';
import type { RateLimits } from './rate-limit.js';

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

/**
 * `onRequest` hook that admits a request only with an active API key, within its rate limit. It
 * runs before the body is read or validated, so an unauthenticated request is a 401 whatever
 * else is wrong with it. An address that sent too many refused keys gets 429 before any check.
 */
export function authenticate(store: Store, limits: RateLimits) {
  return async function authenticateRequest(request: FastifyRequest, reply: FastifyReply) {
    limits.refuseBlocked(request.ip);
    const header = request.headers.authorization;
    if (header === undefined || header === '') {
      throw refuse("Send an API key in the Authorization header as 'Bearer <key>'.", false);
    }
    const match = CREDENTIALS.exec(header);
    if (!match || match[1]!.toLowerCase() !== 'bearer') {
      throw refuse("The Authorization header must use the Bearer scheme: 'Bearer <key>'.", false);
    }
    const token = (match[2] ?? '').trim();
    if (token === '') throw refuse("The Authorization header has no key after 'Bearer'.", false);
    const hash = hashKey(token);
    const key = B64TOKEN.test(token) ? await store.findActiveKey(hash) : undefined;
    if (!key || !sameHash(key.hash, hash)) {
      throw (await limits.noteRefusedKey(request.ip)) ?? refuse('The API key is not valid or has been revoked.', true);
    }
    request.apiKeyId = key.id;
    if (limits.countsKeys) await limits.admitKey(key.id, reply);
  };
}
