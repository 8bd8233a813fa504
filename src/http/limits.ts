import type { IncomingMessage } from 'node:http';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, onRequestHookHandler } from 'fastify';
import { ApiError, notFound } from '../errors.js';
import type { RateFields } from './rate-limit.js';

/** Longest request target (path and query) the service reads: nginx's default buffer size. */
export const URL_LIMIT = 8 * 1024;

const missingHost = () => new ApiError('invalid_request', 'The request is not valid HTTP/1.1: it has no Host header.');

// A message whose framing is in doubt may hide a second request in its body (request
// smuggling): its connection is closed after the answer.
const badFraming = (message: string) => new ApiError('invalid_request', message, { connection: 'close' });

const unspokenVersion = (version: string) =>
  badFraming(
    version === '0.9'
      ? 'The request line names no HTTP version (or HTTP/0.9); send HTTP/1.1.'
      : `The request is HTTP/${version}, which this service does not speak; send HTTP/1.1.`,
  );

/**
 * The 400 a request's framing earns, if any: an HTTP version other than 1.0 and 1.1, two Host
 * fields (RFC 9112 section 3.2), two Authorization fields (a singleton: RFC 9110 section 5.3;
 * which one would count is anyone's guess), or Transfer-Encoding in HTTP/1.0, which does not
 * define it (RFC 9112 section 6.1). Node keeps the first of duplicated singletons in `headers`;
 * `rawHeaders` has them all.
 */
export function framingError(raw: IncomingMessage): ApiError | undefined {
  // Node's parser also takes HTTP/2.0, and a request line with no version as HTTP/0.9: neither
  // is HTTP/1.x, whose framing the rest of the service reads.
  if (raw.httpVersionMajor !== 1) return unspokenVersion(raw.httpVersion);
  let hosts = 0;
  let authorizations = 0;
  const fields = raw.rawHeaders;
  for (let i = 0; i < fields.length; i += 2) {
    const name = fields[i]!;
    if (name.length === 4 && name.toLowerCase() === 'host') hosts++;
    else if (name.length === 13 && name.toLowerCase() === 'authorization') authorizations++;
  }
  if (hosts > 1) return badFraming('The request has more than one Host header; send exactly one.');
  if (authorizations > 1) {
    return badFraming('The request has more than one Authorization header; send exactly one.');
  }
  if (raw.httpVersion === '1.0' && raw.headers['transfer-encoding'] !== undefined) {
    return badFraming(
      'The request is HTTP/1.0 and has a Transfer-Encoding header, which HTTP/1.0 does not define; send Content-Length or use HTTP/1.1.',
    );
  }
  return undefined;
}

const uriTooLong = () =>
  new ApiError('uri_too_long', `The request URL is longer than ${URL_LIMIT} bytes; send a shorter one.`);

/** Security fields of every answer, as a name and a value: secureReply and the parser's raw answers set them. */
export const NOSNIFF = ['x-content-type-options', 'nosniff'] as const;
/** API answers are per key and change with every write; the /docs assets may be cached. */
export const NO_STORE = ['cache-control', 'no-store'] as const;

/** Sets the security fields every answer carries on `reply`. */
export function secureReply(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  reply.header(NOSNIFF[0], NOSNIFF[1]);
  if (!request.url.startsWith('/docs')) reply.header(NO_STORE[0], NO_STORE[1]);
  return reply;
}

/**
 * Global `onRequest` hook, first on every request: the security headers every answer carries,
 * then 400 for a request whose framing is in doubt (framingError), 414 for an over-long URL, 400
 * for HTTP/1.1 without Host and 404 for an unknown path, before any body is read or key
 * checked. The 400s and the 414 carry `earlyFields(request)`: the RateLimit fields of the
 * client's address (the `"refused-keys"` policy, uncounted: app.ts), when there are any. A
 * callback hook: it costs no promise.
 *
 * @example app.addHook('onRequest', guardRequests((request) => limits.peekRefused(clientAddress(request))));
 */
export function guardRequests(earlyFields: (request: FastifyRequest) => RateFields): onRequestHookHandler {
  return function guardRequest(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
    secureReply(request, reply);
    const refusal = earlyRefusal(request);
    if (refusal === undefined) return done(request.is404 ? notFound() : undefined);
    const fields = earlyFields(request);
    if (fields) reply.headers(fields);
    done(refusal);
  };
}

/** guardRequests' 400 or 414 for `request`, if any. */
function earlyRefusal(request: FastifyRequest): ApiError | undefined {
  const framing = framingError(request.raw);
  if (framing) return framing;
  if (request.url.length > URL_LIMIT) return uriTooLong();
  // RFC 9112 section 3.2: an HTTP/1.1 request without Host is a 400.
  if (request.headers.host === undefined && request.raw.httpVersion === '1.1') return missingHost();
  return undefined;
}
