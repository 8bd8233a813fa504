import type { Health } from './slots.js';

/** An answer within this is fast: the endpoint's window grows by one. */
export const FAST_MS = 1000;

/** The window of an endpoint a relay has not attempted yet: a few attempts when it is up, else one. */
export function firstWindow(health: Health): number {
  return health === 'up' ? 4 : 1;
}

/**
 * An endpoint's window after one attempt ended (docs/webhooks.md#pace), as TCP moves its
 * congestion window: one more after each success answered within FAST_MS, so it doubles with
 * each round of attempts while the receiver keeps up; one less after a slower success; half
 * after any other failure; back to one after a timeout. Between 1 and `most`.
 *
 * @example nextWindow(4, { ok: true, timedOut: false, durationMs: 3 }, 64) // 5
 * @example nextWindow(9, { ok: false, timedOut: false, durationMs: 3 }, 64) // 4
 */
export function nextWindow(
  window: number,
  { ok, timedOut, durationMs }: { ok: boolean; timedOut: boolean; durationMs: number },
  most: number,
): number {
  let next: number;
  if (ok) next = durationMs < FAST_MS ? window + 1 : window - 1;
  else next = timedOut ? 1 : Math.floor(window / 2);
  return Math.max(1, Math.min(most, next));
}
