import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import { ApiError, notFound } from '../errors.js';

/** Longest request target (path and query) the service reads: nginx's default buffer size. */
export const URL_LIMIT = 8 * 1024;

const missingHost = () => new ApiError('invalid_request', 'The request is not valid HTTP/1.1: it has no Host header.');

const uriTooLong = () =>
  new ApiError('uri_too_long', `The request URL is longer than ${URL_LIMIT} bytes; send a shorter one.`);

/** Security fields of every answer, as a name and a value: guardRequest, the page cache and the parser's raw answers set them. */
export const NOSNIFF = ['x-content-type-options', 'nosniff'] as const;
/** API answers are per key and change with every write; the /docs assets may be cached. */
export const NO_STORE = ['cache-control', 'no-store'] as const;

/**
 * Global `onRequest` hook, first on every request: the security headers every answer carries,
 * then 414 for an over-long URL, 400 for HTTP/1.1 without Host and 404 for an unknown path,
 * before any body is read or key checked. A callback hook: it costs no promise.
 */
export function guardRequest(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  reply.header(NOSNIFF[0], NOSNIFF[1]);
  if (!request.url.startsWith('/docs')) reply.header(NO_STORE[0], NO_STORE[1]);
  if (request.url.length > URL_LIMIT) return done(uriTooLong());
  // RFC 9112 section 3.2: an HTTP/1.1 request without Host is a 400.
  if (request.headers.host === undefined && request.raw.httpVersion === '1.1') return done(missingHost());
  done(request.is404 ? notFound() : undefined);
}
