import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import { errorCodes, type ErrorBody, type ErrorCode } from './schemas.js';
import { StoreUnavailableError } from './store/store.js';

// C0 and C1 controls, DEL, line and paragraph separators, the bidirectional embeddings,
// overrides and isolates (U+202A–U+202E, U+2066–U+2069: they reorder the text around them as it
// is shown, CVE-2021-42574), and lone surrogates.
const UNPRINTABLE =
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** Longest piece of a request a message quotes, in characters. */
export const ECHO_LIMIT = 64;

/**
 * `text` as one printable line: each control character (Unicode Cc), line or paragraph
 * separator, bidirectional control and lone surrogate is written as its code point
 * (docs/api.md#errors, docs/hardening.md#error-messages).
 *
 * @example oneLine('a\nb') // 'aU+000Ab'
 * @example oneLine('a\u202eb') // 'aU+202Eb'
 */
export function oneLine(text: string): string {
  return text.replace(UNPRINTABLE, (c) => `U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`);
}

/**
 * A piece of the request as a message may quote it: one line (see oneLine), cut to its first
 * ECHO_LIMIT characters with an ellipsis when it was longer. A code point is never split.
 *
 * @example echo('x'.repeat(2000)) // 64 x, then '…'
 * @example echo('a\nb') // 'aU+000Ab'
 */
export function echo(input: string): string {
  const printable = oneLine(input);
  if (printable.length <= ECHO_LIMIT) return printable;
  let end = 0;
  for (const part of printable.matchAll(/U\+[0-9A-F]{4}|[\s\S]/gu)) {
    if (end + part[0].length > ECHO_LIMIT) break;
    end += part[0].length;
  }
  return `${printable.slice(0, end)}…`;
}

/**
 * An error the service answers with on purpose: its code, status and message go to the client.
 * The message is made one line here, so that no source (a parser, a header, a query, a path)
 * can put a control character in it.
 */
export class ApiError extends Error {
  readonly status: number;
  /** The same as `status`; a plain property because Fastify assigns it on validation errors. */
  statusCode: number;
  readonly headers: Record<string, string>;

  constructor(
    readonly code: ErrorCode,
    message: string,
    headers: Record<string, string> = {},
  ) {
    super(oneLine(message));
    this.status = errorCodes[code];
    this.statusCode = this.status;
    this.headers = headers;
  }

  toBody(): ErrorBody {
    return { code: this.code, message: this.message, status: this.status };
  }
}

export const notFound = () =>
  new ApiError('not_found', 'No resource is at this path; the operations are listed at /v1/openapi.json.');

export const unsupportedMediaType = () =>
  new ApiError('unsupported_media_type', "The request body must be sent with 'Content-Type: application/json'.");

/** How long a client is asked to wait after a 503 before it tries again (RFC 9110 section 10.2.3). */
export const UNAVAILABLE_RETRY_SECONDS = 1;

export const unavailable = () =>
  new ApiError('unavailable', 'The database cannot be reached; retry later.', {
    'retry-after': String(UNAVAILABLE_RETRY_SECONDS),
  });

const codeByStatus = new Map<number, ErrorCode>(
  Object.entries(errorCodes).map(([code, status]) => [status, code as ErrorCode]),
);

// Errors Fastify raises itself, mapped onto the contract's catalogue.
const fastifyErrors: Record<string, (error: FastifyError) => ApiError> = {
  FST_ERR_CTP_BODY_TOO_LARGE: () =>
    new ApiError('payload_too_large', 'The request body is larger than 16384 bytes; send a smaller body.'),
  FST_ERR_CTP_INVALID_MEDIA_TYPE: unsupportedMediaType,
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: () =>
    new ApiError('invalid_request', 'The Content-Length header does not match the length of the request body.'),
  // A path with a malformed percent-encoding names no resource.
  FST_ERR_BAD_URL: () => notFound(),
};

/** Turns anything thrown on the request path into the contract's Error body. */
export function toApiError(error: FastifyError | ApiError): ApiError {
  if (error instanceof ApiError) return error;
  if (error instanceof StoreUnavailableError) return unavailable();
  const known = fastifyErrors[error.code];
  if (known) return known(error);
  const status = error.statusCode ?? 500;
  if (status >= 400 && status < 500) {
    return new ApiError(codeByStatus.get(status) ?? 'invalid_request', 'The request could not be processed as sent.');
  }
  return new ApiError('internal_error', 'The service failed to answer; try again later.');
}

export function handleError(error: FastifyError | ApiError, request: FastifyRequest, reply: FastifyReply) {
  const apiError = toApiError(error);
  if (apiError.status >= 500) request.log.error({ err: error }, 'request failed');
  // An answer given before the body has arrived (a 401, 405, 413…) closes the connection after
  // it (RFC 9112 section 9.6): the rest of the body is never read, so no second answer (a 408
  // for a body that stopped coming) can follow on it.
  if (request.raw.complete === false && bodyFollows(request)) reply.header('connection', 'close');
  return reply.code(apiError.status).headers(apiError.headers).send(apiError.toBody());
}

/** True when the request announces a body (RFC 9112 section 6.3). */
function bodyFollows({ headers }: FastifyRequest): boolean {
  const length = headers['content-length'];
  return headers['transfer-encoding'] !== undefined || (length !== undefined && length !== '0');
}

export function handleNotFound(_request: FastifyRequest, reply: FastifyReply) {
  const error = notFound();
  return reply.code(error.status).send(error.toBody());
}

/**
 * The first line of an error's innermost cause, for a log line about a database that went away:
 * StoreUnavailableError's message repeats its cause's, and a stack would say nothing of this code.
 */
export function causeOf(error: unknown): string {
  let inner = error;
  while (inner instanceof Error && inner.cause !== undefined) inner = inner.cause;
  const text =
    inner instanceof Error ? inner.message || (inner as { code?: string }).code || inner.name : String(inner);
  return text.split('\n')[0]!;
}
