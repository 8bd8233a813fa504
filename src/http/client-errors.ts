import type { Socket } from 'node:net';
import { STATUS_CODES } from 'node:http';
import { ApiError } from '../errors.js';
import { NO_STORE, NOSNIFF } from './limits.js';
import type { RateFields } from './rate-limit.js';

function errorFor(code: string | undefined): ApiError {
  switch (code) {
    case 'HPE_HEADER_OVERFLOW':
      return new ApiError('headers_too_large', 'The request headers are larger than 16384 bytes in all.');
    case 'ERR_HTTP_REQUEST_TIMEOUT':
      return new ApiError('request_timeout', 'The request was not received in time; send it again.');
    case 'HPE_INVALID_METHOD':
      return new ApiError('invalid_request', 'The request method is not an HTTP method this service knows.');
    default:
      return new ApiError('invalid_request', 'The request is not valid HTTP/1.1.');
  }
}

/**
 * Answers requests Node's HTTP parser refuses before any route runs (oversized headers,
 * unknown methods, malformed requests, timeouts) with the contract's Error body, and `fields`:
 * the `"refused-keys"` RateLimit fields of the peer's address (RateLimits.peekRefused), when
 * that limit is on. The connection is closed once the answer is flushed: with `reset`, when given,
 * else with a FIN.
 */
export function answerClientError(
  error: Error & { code?: string },
  socket: Socket,
  fields?: RateFields,
  reset?: (socket: Socket) => void,
): void {
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  const apiError = errorFor(error.code);
  const body = JSON.stringify(apiError.toBody());
  if (!socket.writable) return void socket.destroy();
  const answer =
    `HTTP/1.1 ${apiError.status} ${STATUS_CODES[apiError.status]}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    `${NO_STORE[0]}: ${NO_STORE[1]}\r\n` +
    `${NOSNIFF[0]}: ${NOSNIFF[1]}\r\n` +
    (fields ? `RateLimit-Policy: ${fields['ratelimit-policy']}\r\nRateLimit: ${fields.ratelimit}\r\n` : '') +
    'Connection: close\r\n\r\n' +
    body;
  // A reset must not follow a FIN: written, then reset once flushed.
  if (reset) return void socket.write(answer, () => reset(socket));
  // Destroyed once the answer is flushed: after a mere end() the socket would wait, holding its
  // slot, for a client that may never close its side.
  socket.end(answer, () => socket.destroy());
}
