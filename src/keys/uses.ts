import { writeInBatches } from '../store/batches.js';
import type { KeyUse } from '../store/store.js';

/** Each key's last use is written at most this often, per instance (docs/keys.md#listing-keys). */
export const KEY_USE_WRITE_MS = 60_000;
/** How long a use waits in memory before it is written with the others. */
export const KEY_USE_FLUSH_MS = 10_000;

/**
 * Last uses of keys, kept in memory on the request path and written by `write` in batches, off
 * it: a timer (which never keeps the process alive) writes what was noted, and a key whose use
 * was written less than KEY_USE_WRITE_MS before is not noted again. A failed write is retried
 * with the next batch; no request ever waits for one or fails because of one.
 *
 * @example
 * const uses = batchKeyUses((batch) => store.writeUses(batch));
 * uses.note(7, Date.now()); // a Map lookup; written within KEY_USE_FLUSH_MS
 * await uses.close(); // writes what is pending
 */
export function batchKeyUses(write: (uses: KeyUse[]) => Promise<void> | void, flushEveryMs: number = KEY_USE_FLUSH_MS) {
  const pending = new Map<number, number>();
  const written = new Map<number, number>();

  async function writeBatch(): Promise<void> {
    if (pending.size === 0) return;
    const uses = [...pending].map(([id, at]) => ({ id, at }));
    pending.clear();
    for (const use of uses) written.set(use.id, use.at);
    try {
      await write(uses);
    } catch {
      for (const use of uses) {
        written.delete(use.id);
        if (!pending.has(use.id)) pending.set(use.id, use.at);
      }
      batches.schedule();
    }
  }

  const batches = writeInBatches(writeBatch, () => pending.size > 0, flushEveryMs);

  return {
    note(id: number, now: number): void {
      const last = written.get(id);
      if (last !== undefined && now - last < KEY_USE_WRITE_MS) return;
      pending.set(id, now);
      batches.schedule();
    },
    flush: batches.flush,
    close: batches.close,
  };
}
