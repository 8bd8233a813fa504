import { writeInBatches } from '../store/batches.js';

/** How long a hit counted in memory waits before it is written with the others (PostgreSQL). */
export const HIT_FLUSH_MS = 200;

/**
 * Adds `hits[i]` to `subjects[i]`'s count in the window starting at `windowStart`, on every
 * instance sharing the store, in one statement; resolves to the totals of those subjects after it.
 */
export type WriteHits = (windowStart: number, subjects: string[], hits: number[]) => Promise<Map<string, number>>;

/**
 * Fixed-window hit counts shared by instances through `write`, counted in this process's
 * memory and written in batches: on the request path a hit is a Map update and the count
 * returned is the shared total as of this instance's last write plus the hits it counted since.
 * A timer (which never keeps the process alive) writes the new hits every `flushEveryMs`, one
 * statement for every subject, one batch at a time, and keeps the totals it answers. So the
 * store sees at most one write per instance per `flushEveryMs`, whatever the load.
 *
 * Another instance's hits reach this one's count within two intervals (its write, then this
 * one's) and a round trip: with N instances, a key may get beyond its limit about what the
 * other instances admit in that time, and never more than N times its limit in one window,
 * since each instance refuses on its own hits alone. While the store cannot be written, the
 * hits are kept and sent with the next batch, and the count goes on from the last totals:
 * no request waits for the store, or fails because of it.
 *
 * @example
 * const counters = batchedCounters(writeToDatabase);
 * counters.countHit('key:7', windowStart); // the count, at once; written within 200 ms
 */
export function batchedCounters(write: WriteHits, flushEveryMs: number = HIT_FLUSH_MS) {
  let window = -Infinity;
  // Totals as of the last write (every instance's hits), those in the write in flight, and those not sent yet.
  let shared = new Map<string, number>();
  let sending = new Map<string, number>();
  let pending = new Map<string, number>();

  async function writeBatch(): Promise<void> {
    if (pending.size === 0) return;
    const windowStart = window;
    const batch = pending;
    pending = new Map();
    sending = batch;
    // In one order on every instance, so two batches never wait for each other's row locks in turn.
    const subjects = [...batch.keys()].sort();
    try {
      const totals = await write(
        windowStart,
        subjects,
        subjects.map((subject) => batch.get(subject)!),
      );
      if (windowStart === window) for (const [subject, hits] of totals) shared.set(subject, hits);
    } catch {
      if (windowStart === window)
        for (const [subject, hits] of batch) pending.set(subject, (pending.get(subject) ?? 0) + hits);
    } finally {
      if (windowStart === window) sending = new Map();
      batches.schedule();
    }
  }

  const batches = writeInBatches(writeBatch, () => pending.size > 0, flushEveryMs);

  return {
    /** Counts one hit and returns the count so far in the window: at once, with no database work. */
    countHit(subject: string, windowStart: number): number {
      if (windowStart > window) {
        window = windowStart;
        shared = new Map();
        sending = new Map();
        pending = new Map();
      }
      // A late caller still in an older window counts in the newest one: never under-counts.
      const mine = (pending.get(subject) ?? 0) + 1;
      pending.set(subject, mine);
      batches.schedule();
      return (shared.get(subject) ?? 0) + (sending.get(subject) ?? 0) + mine;
    },
    /** Writes the hits counted so far now, instead of at the next tick of the timer. */
    flush: batches.flush,
    /** Writes what is pending, once more, and schedules nothing after. */
    close: batches.close,
  };
}
