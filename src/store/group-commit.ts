import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import type { Database } from 'better-sqlite3';

interface Pending<I, O> {
  input: I;
  resolve: (output: O) => void;
  reject: (error: unknown) => void;
  output?: O;
  error?: unknown;
  failed: boolean;
  /** performance.now() past which a failed try is not retried. */
  deadline: number;
}

export interface RetryOptions {
  /** True for an error after which trying again later may succeed (SQLITE_BUSY). */
  when: (error: unknown) => boolean;
  /** Longest time a call is retried for, from when it was made. */
  timeoutMs: number;
  /** What a call still refused at its deadline fails with; the refusal itself by default. */
  exhausted?: (error: unknown) => unknown;
}

const FIRST_PAUSE_MS = 5;
const LONGEST_PAUSE_MS = 100;

const giveUp = (retry: RetryOptions | undefined, error: unknown) => (retry?.exhausted ? retry.exhausted(error) : error);

/**
 * `work()`, and when it throws an error `retry.when` accepts, `work()` again after growing pauses
 * that block nothing (5 ms, doubling, at most 100 ms), the last try at `retry.timeoutMs` after the
 * first refusal; still refused then, it fails with `retry.exhausted` of the error. Answers
 * synchronously when the first try succeeds: no promise, no clock read. `work` must change
 * nothing when it is refused (one statement, or a transaction that takes its lock first).
 *
 * @example
 * const row = await retrying(() => getPet.get(id), { when: isBusy, timeoutMs: 5000 });
 */
export function retrying<T>(work: () => T, retry: RetryOptions): T | Promise<T> {
  try {
    return work();
  } catch (error) {
    if (!retry.when(error)) throw error;
    return retryUntil(work, retry, error, performance.now() + retry.timeoutMs);
  }
}

async function retryUntil<T>(work: () => T, retry: RetryOptions, error: unknown, deadline: number): Promise<T> {
  for (let pause = FIRST_PAUSE_MS; ; pause = Math.min(pause * 2, LONGEST_PAUSE_MS)) {
    const left = deadline - performance.now();
    if (left <= 0) throw giveUp(retry, error);
    await new Promise((resolve) => setTimeout(resolve, Math.min(pause, left)));
    try {
      return work();
    } catch (again) {
      if (!retry.when(again)) throw again;
      error = again;
    }
  }
}

/**
 * Group commit: every call made during one turn of the event loop is written in one IMMEDIATE
 * transaction, so they share one fsync (synchronous=FULL still holds: each promise resolves only
 * after that COMMIT returned). Each call runs in its own SAVEPOINT, so one that throws fails
 * alone and the others still commit; a failed COMMIT fails them all, none of them stored.
 * With `oneStatementEach`, `write` runs a single SQL statement, which SQLite undoes by itself
 * when it fails (ON CONFLICT ABORT keeps the transaction): no SAVEPOINT, two statements fewer;
 * or, for a call that needs several, a `db.transaction` function, which better-sqlite3 runs
 * inside the group's transaction as that call's own SAVEPOINT.
 * An error after which SQLite rolled the whole transaction back (a full disk) fails them all.
 * With `retry`, a batch whose transaction failed with an error `retry.when` accepts (another
 * process holds the write lock) is tried again, with all calls made meanwhile, after a growing
 * pause (5 ms, doubling, at most 100 ms) that blocks nothing, and no later than the first
 * deadline among them; a call still not written `retry.timeoutMs` after it was made fails then
 * with `retry.exhausted` of that error (one deadline per call, not one per try). Nothing was
 * written by a failed try, so whatever the number of calls waiting, the process blocks for one
 * try per pause.
 * `beforeWrite` runs before each transaction begins (to end the turn's read transaction: readTurns);
 * `afterCommit` after each transaction that committed (to wake the webhook relay: sqlite.ts).
 * A transaction holding calls from several callers runs in OpenTelemetry's root context, as
 * batches do (batches.ts): it is a child of none of their spans (docs/operations.md#tracing).
 *
 * @example
 * const insertPet = groupCommits(db, (pet) => insert.run(pet.name).lastInsertRowid);
 * await Promise.all([insertPet(a), insertPet(b)]); // one transaction, one fsync
 */
export function groupCommits<I, O>(
  db: Database,
  write: (input: I) => O,
  {
    oneStatementEach = false,
    retry,
    beforeWrite,
    afterCommit,
  }: { oneStatementEach?: boolean; retry?: RetryOptions; beforeWrite?: () => void; afterCommit?: () => void } = {},
): { call(input: I): Promise<O>; flush(): void } {
  let queue: Pending<I, O>[] = [];
  let pause = FIRST_PAUSE_MS;
  let waiting: NodeJS.Timeout | undefined;
  // better-sqlite3 runs a transaction function called inside another as a SAVEPOINT.
  const writeOne = oneStatementEach ? write : db.transaction(write);
  const writeAll = db.transaction((batch: Pending<I, O>[]) => {
    for (const item of batch) {
      item.failed = false;
      try {
        item.output = writeOne(item.input);
      } catch (error) {
        if (!db.inTransaction) throw error;
        item.error = error;
        item.failed = true;
      }
    }
  });

  function commit(batch: Pending<I, O>[]) {
    beforeWrite?.();
    writeAll.immediate(batch);
  }

  function flush() {
    clearTimeout(waiting);
    waiting = undefined;
    const batch = queue;
    queue = [];
    if (batch.length === 0) return;
    try {
      if (batch.length === 1) commit(batch);
      else context.with(ROOT_CONTEXT, commit, undefined, batch);
    } catch (error) {
      const now = performance.now();
      const retryable = retry?.when(error) ?? false;
      const again: Pending<I, O>[] = [];
      let first = Infinity;
      for (const item of batch) {
        if (!retryable) item.reject(error);
        else if (item.deadline > now) {
          again.push(item);
          first = Math.min(first, item.deadline);
        } else item.reject(giveUp(retry, error));
      }
      if (again.length > 0) {
        // Calls made meanwhile are queued after these, with later deadlines.
        queue = again.concat(queue);
        waiting = setTimeout(flush, Math.min(pause, first - now));
        pause = Math.min(pause * 2, LONGEST_PAUSE_MS);
      }
      return;
    }
    pause = FIRST_PAUSE_MS;
    for (const item of batch) {
      if (item.failed) item.reject(item.error);
      else item.resolve(item.output!);
    }
    afterCommit?.();
  }

  return {
    call: (input: I) =>
      new Promise<O>((resolve, reject) => {
        // After the poll phase: every request read from the sockets in this turn joins the batch.
        if (queue.length === 0) setImmediate(flush);
        const deadline = performance.now() + (retry?.timeoutMs ?? 0);
        queue.push({ input, resolve, reject, failed: false, deadline });
      }),
    /** Commits what is queued now (before closing the database). */
    flush,
  };
}
