/**
 * The timing of a writer that works in batches off the request path: `schedule` sets a timer
 * (which never keeps the process alive) that runs `writeBatch` `everyMs` later when
 * `hasPending` says there is something to write; batches run one at a time, so a slow database
 * never has two of them in flight from one instance.
 *
 * @example
 * const batches = writeInBatches(writeBatch, () => pending.size > 0, 200);
 * batches.schedule(); // after noting something
 * await batches.close(); // writes what is pending, schedules nothing after
 */
export function writeInBatches(writeBatch: () => Promise<void>, hasPending: () => boolean, everyMs: number) {
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> = Promise.resolve();
  let closed = false;

  function flush(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    writing = writing.then(writeBatch);
    return writing;
  }

  return {
    schedule(): void {
      if (timer || closed || !hasPending()) return;
      timer = setTimeout(() => void flush(), everyMs);
      timer.unref();
    },
    /** Writes what is pending now, instead of at the next tick of the timer. */
    flush,
    /** Writes what is pending, once more, and schedules nothing after. */
    close(): Promise<void> {
      closed = true;
      return flush();
    },
  };
}
