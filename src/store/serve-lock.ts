import { closeSync, openSync } from 'node:fs';
import { hostname } from 'node:os';
import Database from 'better-sqlite3';

/** Who serves a SQLite file, as its lock file says. */
export interface Server {
  pid: number;
  host: string;
  startedAt: string;
}

/** Another process serves the file: `holder` is who, when its lock file could be read. */
export class ServedElsewhere extends Error {
  constructor(readonly holder: Server | undefined) {
    super(
      holder
        ? `another petstore serve is serving it (pid ${holder.pid} on ${holder.host}, started ${holder.startedAt})`
        : 'another petstore serve is serving it',
    );
    this.name = 'ServedElsewhere';
  }
}

/** The lock file beside the database at `path`. */
export const serveLockPath = (path: string) => `${path}.lock`;

const isBusy = (error: unknown) => String((error as { code?: unknown }).code).startsWith('SQLITE_BUSY');

// A process that died (kill -9) left its row behind, not its lock: a start that finds the lock
// taken while the row names a process gone from this machine tries again, a few times, since
// what it met was a refused start reading the row.
const TRIES = 20;
const PAUSE_MS = 25;

const gone = ({ pid, host }: Server) => {
  if (host !== hostname()) return false;
  try {
    process.kill(pid, 0);
    return false;
  } catch (error) {
    return (error as { code?: unknown }).code === 'ESRCH';
  }
};

/**
 * Takes the database at `path` for this serving process alone (docs/operations.md#one-process-per-sqlite-file),
 * with SQLite's own locks on a small file beside it (`<path>.lock`): the process writes its pid,
 * host and start there under an exclusive lock, then holds a read lock for as long as it lives,
 * which the operating system drops when the process ends, however it ends (a kill -9 included).
 * A second process finds the exclusive lock refused and throws ServedElsewhere, naming the first
 * from the row it wrote. Returns the function that lets the file go.
 */
export function holdServeLock(path: string, startedAt = new Date()): () => void {
  const file = serveLockPath(path);
  // Owner-only, as the database is.
  closeSync(openSync(file, 'a', 0o600));
  const me: Server = { pid: process.pid, host: hostname(), startedAt: startedAt.toISOString() };
  for (let tries = 1; ; tries++) {
    const held = tryOnce(file, me);
    if (held instanceof Database) return () => held.close();
    if (!held || tries >= TRIES || !gone(held)) throw new ServedElsewhere(held);
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, PAUSE_MS);
  }
}

/** The connection holding the lock; else who holds it, as its row says (undefined: unreadable). */
function tryOnce(file: string, me: Server): Database.Database | Server | undefined {
  // Rollback journal, never WAL: its readers block a writer, which is the whole point here.
  const writer = new Database(file, { timeout: 0 });
  try {
    writer.pragma('journal_mode = DELETE');
    writer.exec('BEGIN EXCLUSIVE');
    writer.exec(
      'CREATE TABLE IF NOT EXISTS server (pid INTEGER NOT NULL, host TEXT NOT NULL, started_at TEXT NOT NULL)',
    );
    writer.exec('DELETE FROM server');
    writer.prepare('INSERT INTO server (pid, host, started_at) VALUES (?, ?, ?)').run(me.pid, me.host, me.startedAt);
    writer.exec('COMMIT');
  } catch (error) {
    writer.close();
    if (!isBusy(error)) throw error;
    return readServer(file);
  }
  writer.close();
  // The read lock, held from here on. A start that took the file between the commit and this
  // read wrote its own row: the row read then is not this process's, and this one gives way.
  const reader = new Database(file, { timeout: 0 });
  try {
    reader.exec('BEGIN');
    const row = reader.prepare<[], Server>('SELECT pid, host, started_at AS startedAt FROM server').get();
    if (row && row.pid === me.pid && row.host === me.host && row.startedAt === me.startedAt) return reader;
    reader.close();
    return row;
  } catch (error) {
    reader.close();
    if (!isBusy(error)) throw error;
    return readServer(file);
  }
}

/** The row of the process serving the file, read while another may be writing it (up to a second). */
function readServer(file: string): Server | undefined {
  const reader = new Database(file, { timeout: 1000, readonly: true });
  try {
    return reader.prepare<[], Server>('SELECT pid, host, started_at AS startedAt FROM server').get();
  } catch {
    return undefined;
  } finally {
    reader.close();
  }
}
