import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { ApiError } from '../errors.js';
import { batchedCounters, HIT_FLUSH_MS } from './rate-counters.js';
import type { Store } from '../store/store.js';
import { addressGroup } from './addresses.js';
import { CountMinSketch } from './sketch.js';

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
 * Per-API-key rate limit, in fixed windows counted by the store (in memory; on PostgreSQL shared
 * by every instance through batched writes, see rate-counters.ts), and per-address limit on refused
 * keys, counted by each instance in fixed memory (a count-min sketch: see docs/hardening.md). The fields are those of the IETF httpapi
 * RateLimit header fields draft: `RateLimit-Policy: "default";q=6000;w=60` and
 * `RateLimit: "default";r=5999;t=42`; the refused-key limit is the policy `"refused-keys"`.
 */
export class RateLimits {
  /** Hits by key, counted here and added to the store's shared counts in batches. */
  readonly #hits: ReturnType<typeof batchedCounters>;
  readonly #clock: Clock;
  readonly #limit: number | undefined;
  readonly #failureLimit: number | undefined;
  readonly #windowMs: number;
  readonly #policy: string;
  readonly #refusedPolicy: string;
  /** Refused keys by address in the current window, in this instance; none when the limit is off. */
  readonly #refused: CountMinSketch | undefined;
  #refusedWindow = -Infinity;

  constructor(store: Store, clock: Clock, config: Config, flushEveryMs: number = HIT_FLUSH_MS) {
    this.#hits = batchedCounters((...batch) => store.addHits(...batch), flushEveryMs);
    this.#clock = clock;
    this.#limit = config.rateLimit;
    this.#failureLimit = config.authFailureLimit;
    this.#windowMs = config.rateLimitWindowSeconds * 1000;
    this.#policy = `"default";q=${config.rateLimit};w=${config.rateLimitWindowSeconds}`;
    this.#refusedPolicy = `"refused-keys";q=${config.authFailureLimit};w=${config.rateLimitWindowSeconds}`;
    this.#refused = config.authFailureLimit === undefined ? undefined : new CountMinSketch();
  }

  /**
   * Counts a request by `apiKeyId` and returns the RateLimit fields its answer carries
   * (undefined when the limit is off); throws 429 past the limit. Counted in memory and written
   * in batches (rate-counters.ts), so no request waits for the database to be counted.
   */
  admitKey(apiKeyId: number, now = this.#clock.now()): RateFields {
    if (this.#limit === undefined) return undefined;
    const window = windowAt(now, this.#windowMs);
    return this.#judge(this.#hits.countHit(`key:${apiKeyId}`, window.start), window);
  }

  /** Writes the hits not yet written; counts nothing after. */
  close(): Promise<void> {
    return this.#hits.close();
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

  /**
   * Counts a refused key from `address` and returns the `"refused-keys"` fields its 401 carries
   * (undefined when that limit is off); throws the 429 to answer instead once the address sent
   * more than the limit in this window. It never refuses a valid key: it is asked only about
   * keys already refused.
   */
  noteRefusedKey(address: string): RateFields {
    const refused = this.#refusedNow();
    if (refused === undefined) return undefined;
    // Counted by address group: an IPv6 client by its /64, which it holds whole (connections.ts).
    const group = addressGroup(address);
    const count = refused.sketch.add(group);
    if (count <= this.#failureLimit!) return this.#refusedFields(count, refused.window);
    const from = group.endsWith('/64') ? `${address}, counted with the rest of ${group}` : group;
    throw tooManyRequests(
      `Too many refused API keys came from ${from}; retry after ${refused.window.secondsLeft} seconds, or send a valid key, which is served.`,
      refused.window.secondsLeft,
      this.#refusedFields(count, refused.window),
    );
  }

  /**
   * The `"refused-keys"` fields of `address`, counting nothing: what an answer given before
   * any key was read (no credentials, a malformed request) carries. Undefined when that limit
   * is off.
   */
  peekRefused(address: string): RateFields {
    const refused = this.#refusedNow();
    if (refused === undefined) return undefined;
    return this.#refusedFields(refused.sketch.peek(addressGroup(address)), refused.window);
  }

  /** The refused-key counts of the current window (cleared when a new one began); none when the limit is off. */
  #refusedNow(): { sketch: CountMinSketch; window: ReturnType<typeof windowAt> } | undefined {
    const sketch = this.#refused;
    if (sketch === undefined) return undefined;
    const window = windowAt(this.#clock.now(), this.#windowMs);
    if (window.start > this.#refusedWindow) {
      sketch.clear();
      this.#refusedWindow = window.start;
    }
    return { sketch, window };
  }

  #refusedFields(count: number, window: ReturnType<typeof windowAt>): NonNullable<RateFields> {
    return {
      'ratelimit-policy': this.#refusedPolicy,
      ratelimit: `"refused-keys";r=${Math.max(0, this.#failureLimit! - count)};t=${window.secondsLeft}`,
    };
  }
}

/** `error` with the RateLimit `fields` added to the fields it is answered with. */
export function withFields(error: ApiError, fields: RateFields): ApiError {
  return fields ? new ApiError(error.code, error.message, { ...error.headers, ...fields }) : error;
}
