/** The longest wait between two retries, whatever the attempt number. */
export const MAX_RETRY_DELAY_MS = 6 * 3_600_000;

/**
 * The wait after failed attempt `attempt` (1 for the first): PETSTORE_WEBHOOK_RETRY_MS doubled
 * with each attempt, up to MAX_RETRY_DELAY_MS, and up to half as much again at random, so
 * receivers that failed together are not retried together (docs/webhooks.md#retries). An
 * endpoint that is down is probed on the same schedule, counted in its failures in a row
 * (slots.ts, endpointAfter).
 *
 * @example retryDelay(1, 5000, () => 0) // 5000
 * @example retryDelay(3, 5000, () => 0) // 20000
 */
export function retryDelay(attempt: number, retryMs: number, random: () => number = Math.random): number {
  const base = Math.min(retryMs * 2 ** Math.min(attempt - 1, 40), MAX_RETRY_DELAY_MS);
  return Math.round(base + random() * (base / 2));
}
