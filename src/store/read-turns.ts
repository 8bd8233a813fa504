import type { Database } from 'better-sqlite3';

/**
 * One read transaction for every read of one turn of the event loop. In WAL mode each read
 * statement outside a transaction takes SQLite's read lock and drops it again (two `fcntl`
 * system calls, and an `fstat` when the WAL holds no frames); the reads of one turn share one
 * lock instead, taken by the first and dropped at `setImmediate`, after the poll phase, so it is
 * never held while the process waits for anything. The reads of one turn see one snapshot: the
 * requests they answer arrived together.
 *
 * A write must call `end()` first: inside the read transaction its statements would commit only
 * when the turn ends, after its caller was told they had.
 *
 * @example
 * const reads = readTurns(db);
 * reads.begin(); // BEGIN on the first read of the turn, nothing after it
 * const row = getPet.get(id);
 * reads.end(); // before a write: COMMIT of the reads, nothing else to commit
 */
export function readTurns(db: Database) {
  const beginStatement = db.prepare('BEGIN');
  const commitStatement = db.prepare('COMMIT');
  // Whether this opened the transaction: not db.inTransaction, which a write's own transaction
  // also sets, and end() must never commit a transaction it did not begin.
  let open = false;

  function end(): void {
    if (!open) return;
    open = false;
    // Every write ended the transaction first, so it only read: its COMMIT releases the lock and
    // writes nothing, and cannot fail for want of a lock or of disk space.
    if (db.inTransaction) commitStatement.run();
  }

  return {
    /** Opens the turn's read transaction, if it is not open: call it before each read. */
    begin(): void {
      if (open) return;
      beginStatement.run();
      open = true;
      setImmediate(end);
    },
    end,
  };
}
