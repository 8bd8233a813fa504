import type { components } from './schema.js';

/** An Error code from the API's catalogue, or one of the client's own for failures with no Error body. */
export type ErrorCode = components['schemas']['Error']['code'] | 'network_error' | 'unexpected_response';

/**
 * What every failed call throws. `code`, `message` and `status` are the service's Error body;
 * a failure that never got one has code `network_error` (status 0) or `unexpected_response`.
 */
export class PetstoreError extends Error {
  override readonly name = 'PetstoreError';

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly status: number,
    /** Seconds the service asked to wait (`Retry-After`), when it did. */
    readonly retryAfter?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

function isErrorBody(body: unknown): body is components['schemas']['Error'] {
  const candidate = body as Record<string, unknown> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.code === 'string' &&
    typeof candidate.message === 'string' &&
    typeof candidate.status === 'number'
  );
}

/** The error for a non-2xx `response` whose body openapi-fetch read as `body`. */
export function errorFromResponse(response: Response, body: unknown): PetstoreError {
  const seconds = Number(response.headers.get('retry-after') ?? NaN);
  const retryAfter = Number.isFinite(seconds) && seconds >= 0 ? seconds : undefined;
  if (isErrorBody(body)) return new PetstoreError(body.code, body.message, response.status, retryAfter);
  return new PetstoreError(
    'unexpected_response',
    `The service answered ${response.status} without an Error body.`,
    response.status,
    retryAfter,
  );
}
