import type { Database } from 'better-sqlite3';

interface Pending<I, O> {
  input: I;
  resolve: (output: O) => void;
  reject: (error: unknown) => void;
  output?: O;
  error?: unknown;
  failed: boolean;
}

/**
 * Group commit: every call made during one turn of the event loop is written in one IMMEDIATE
 * transaction, so they share one fsync (synchronous=FULL still holds: each promise resolves only
 * after that COMMIT returned). Each call runs in its own SAVEPOINT, so one that throws fails
 * alone and the others still commit; a failed COMMIT fails them all, none of them stored.
 * With `oneStatementEach`, `write` runs a single SQL statement, which SQLite undoes by itself
 * when it fails (ON CONFLICT ABORT keeps the transaction): no SAVEPOINT, two statements fewer.
 * An error after which SQLite rolled the whole transaction back (a full disk) fails them all.
 *
 * @example
 * const insertPet = groupCommits(db, (pet) => insert.run(pet.name).lastInsertRowid);
 * await Promise.all([insertPet(a), insertPet(b)]); // one transaction, one fsync
 */
export function groupCommits<I, O>(
  db: Database,
  write: (input: I) => O,
  { oneStatementEach = false }: { oneStatementEach?: boolean } = {},
): { call(input: I): Promise<O>; flush(): void } {
  let queue: Pending<I, O>[] = [];
  // better-sqlite3 runs a transaction function called inside another as a SAVEPOINT.
  const writeOne = oneStatementEach ? write : db.transaction(write);
  const writeAll = db.transaction((batch: Pending<I, O>[]) => {
    for (const item of batch) {
      try {
        item.output = writeOne(item.input);
      } catch (error) {
        if (!db.inTransaction) throw error;
        item.error = error;
        item.failed = true;
      }
    }
  });

  function flush() {
    const batch = queue;
    queue = [];
    if (batch.length === 0) return;
    try {
      writeAll.immediate(batch);
    } catch (error) {
      for (const item of batch) item.reject(error);
      return;
    }
    for (const item of batch) {
      if (item.failed) item.reject(item.error);
      else item.resolve(item.output!);
    }
  }

  return {
    call: (input: I) =>
      new Promise<O>((resolve, reject) => {
        // After the poll phase: every request read from the sockets in this turn joins the batch.
        if (queue.length === 0) setImmediate(flush);
        queue.push({ input, resolve, reject, failed: false });
      }),
    /** Commits what is queued now (before closing the database). */
    flush,
  };
}
