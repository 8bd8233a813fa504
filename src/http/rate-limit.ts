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

/** The RateLimit and RateLimit-Policy fields of an admitted request; undefined when the limit is off. */
export type RateFields = Record<'ratelimit' | 'ratelimit-policy', string> | undefined;

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

  /**
   * Counts a request by `apiKeyId` and returns the RateLimit fields its answer carries
   * (undefined when the limit is off); throws 429 past the limit. Synchronous when the store
   * counts in this process (SQLite), so such a request waits for no promise.
   */
  admitKey(apiKeyId: number): RateFields | Promise<RateFields> {
    if (this.#limit === undefined) return undefined;
    const window = windowAt(this.#clock.now(), this.#windowMs);
    const hits = this.#countHit(`key:${apiKeyId}`, window.start);
    return typeof hits === 'number' ? this.#judge(hits, window) : hits.then((n) => this.#judge(n, window));
  }

  /** The store's count, at once when the store counts in this process's memory (SQLite). */
  #countHit(subject: string, windowStart: number): number | Promise<number> {
    const { memory } = this.#store;
    return memory.countHit ? memory.countHit(subject, windowStart) : this.#store.countHit(subject, windowStart);
  }

  #judge(hits: number, window: ReturnType<typeof windowAt>): RateFields {
    const limit = this.#limit!;
    const fields = {
      'ratelimit-policy': this.#policy,
      ratelimit: `"default";r=${Math.max(0, limit - hits)};t=${window.secondsLeft}`,
    };
    if (hits > limit) {
      throw tooManyRequests(
        `This API key made more than ${limit} requests in ${this.#windowMs / 1000} seconds; retry after ${window.secondsLeft} seconds.`,
        window.secondsLeft,
        fields,
      );
    }
    return fields;
  }

  /** True while some address is refused for sending too many refused keys. */
  get blocksAddresses(): boolean {
    return this.#blocked.size > 0;
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
    const hits = await this.#countHit(`address:${address}`, window.start);
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
