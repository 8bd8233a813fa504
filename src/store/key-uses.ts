/** Each key's last use is written at most this often, per instance (CONTRACT.md `keys list`). */
export const KEY_USE_WRITE_MS = 60_000;
/** How long a use waits in memory before it is written with the others. */
export const KEY_USE_FLUSH_MS = 10_000;

export interface KeyUse {
  id: number;
  /** Unix ms. */
  at: number;
}

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
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> = Promise.resolve();
  let closed = false;

  const schedule = () => {
    if (timer || closed || pending.size === 0) return;
    timer = setTimeout(() => void flush(), flushEveryMs);
    timer.unref();
  };

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
      schedule();
    }
  }

  // One batch at a time: a slow database never has two of them in flight from one instance.
  function flush(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    writing = writing.then(writeBatch);
    return writing;
  }

  return {
    note(id: number, now: number): void {
      const last = written.get(id);
      if (last !== undefined && now - last < KEY_USE_WRITE_MS) return;
      pending.set(id, now);
      schedule();
    },
    flush,
    /** Writes what is pending, once more, and schedules nothing after. */
    close(): Promise<void> {
      closed = true;
      return flush();
    },
  };
}
