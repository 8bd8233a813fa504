import type { FastifyReply } from 'fastify';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import type { Store } from '../store/store.js';

/** The window `now` falls in, and the whole seconds left in it (at least 1). */
function windowAt(now: number, windowMs: number): { start: number; end: number; secondsLeft: number } {
  const start = now - (now % windowMs);
  const end = start + windowMs;
  return { start, end, secondsLeft: Math.max(1, Math.ceil((end - now) / 1000)) };
}

const tooManyRequests = (message: string, secondsLeft: number, headers: Record<string, string> = {}) =>
  new ApiError('rate_limited', message, { ...headers, 'retry-after': String(secondsLeft) });

/**
 * Per-API-key rate limit and per-address limit on refused keys, in fixed windows counted by
 * the store (shared by every instance on PostgreSQL). The fields are those of the IETF httpapi
 * RateLimit header fields draft: `RateLimit-Policy: "default";q=6000;w=60` and
 * `RateLimit: "default";r=5999;t=42`.
 */
export class RateLimits {
  readonly #store: Store;
  readonly #clock: Clock;
  readonly #limit: number | undefined;
  readonly #failureLimit: number | undefined;
  readonly #windowMs: number;
  readonly #policy: string;
  /** Addresses refused until the end of the window, by this instance (unix ms). */
  #blocked = new Map<string, number>();
  #blockedWindow = 0;

  constructor(store: Store, clock: Clock, config: Config) {
    this.#store = store;
    this.#clock = clock;
    this.#limit = config.rateLimit;
    this.#failureLimit = config.authFailureLimit;
    this.#windowMs = config.rateLimitWindowSeconds * 1000;
    this.#policy = `"default";q=${config.rateLimit};w=${config.rateLimitWindowSeconds}`;
  }

  /** False when the per-key limit is off: then admitKey does nothing. */
  get countsKeys(): boolean {
    return this.#limit !== undefined;
  }

  /** Counts a request by `apiKeyId`, sets the RateLimit fields on `reply`, and throws 429 past the limit. */
  async admitKey(apiKeyId: number, reply: FastifyReply): Promise<void> {
    if (this.#limit === undefined) return;
    const window = windowAt(this.#clock.now(), this.#windowMs);
    const hits = await this.#store.countHit(`key:${apiKeyId}`, window.start);
    const fields = {
      'ratelimit-policy': this.#policy,
      ratelimit: `"default";r=${Math.max(0, this.#limit - hits)};t=${window.secondsLeft}`,
    };
    reply.headers(fields);
    if (hits > this.#limit) {
      throw tooManyRequests(
        `This API key made more than ${this.#limit} requests in ${this.#windowMs / 1000} seconds; retry after ${window.secondsLeft} seconds.`,
        window.secondsLeft,
        fields,
      );
    }
  }

  /** Throws 429 when `address` sent too many refused keys in this window. */
  refuseBlocked(address: string): void {
    const until = this.#blocked.get(address);
    const now = this.#clock.now();
    if (until !== undefined && until > now) throw this.#blockedError(address, Math.ceil((until - now) / 1000));
  }

  /** Counts a refused key from `address`; returns the 429 to answer instead of 401 past the limit. */
  async noteRefusedKey(address: string): Promise<ApiError | undefined> {
    if (this.#failureLimit === undefined) return undefined;
    const window = windowAt(this.#clock.now(), this.#windowMs);
    if (window.start !== this.#blockedWindow) {
      this.#blocked = new Map();
      this.#blockedWindow = window.start;
    }
    const hits = await this.#store.countHit(`address:${address}`, window.start);
    if (hits <= this.#failureLimit) return undefined;
    this.#blocked.set(address, window.end);
    return this.#blockedError(address, window.secondsLeft);
  }

  #blockedError(address: string, secondsLeft: number): ApiError {
    return tooManyRequests(
      `Too many refused API keys came from ${address}; retry after ${secondsLeft} seconds with a valid key.`,
      secondsLeft,
    );
  }
}
