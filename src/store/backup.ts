import {
  closeSync,
  constants,
  existsSync,
  fstatSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
  type Stats,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { clockFloorAt } from '../events/ids.js';
import { readMigrations, unknownMigrations, type AppliedMigration } from './migrations.js';
import { appliedSqliteMigrations, openSqliteStore } from './sqlite.js';

/** A backup or restore that was refused or failed; its message is one line, for the operator. */
export class OperationRefused extends Error {}

const codeOf = (error: unknown) => String((error as { code?: unknown }).code);
const isBusy = (error: unknown) => codeOf(error).startsWith('SQLITE_BUSY') || codeOf(error).startsWith('SQLITE_LOCKED');

/** The files SQLite keeps beside a database, named after it, and reads with it when they are there. */
const COMPANIONS = ['-wal', '-journal', '-shm'] as const;

/** What an operator does when another process writes beside a copy, per command. */
const ADVICE = {
  backup: 'write backups into a folder that only you can write to (docs/operations.md#backups-and-restore).',
  restore:
    "keep the database in a folder that only the service's user can write to (docs/operations.md#backups-and-restore).",
};

/** The lstat of `path`, or undefined when nothing has that name. */
function lstatIfAny(path: string): Stats | undefined {
  try {
    return lstatSync(path);
  } catch (error) {
    if (codeOf(error) === 'ENOENT') return undefined;
    throw error;
  }
}

const sameFile = (a: Stats, b: Stats) => a.dev === b.dev && a.ino === b.ino;

/**
 * A temporary copy made in a private folder: a folder that mkdtemp creates (0700, owned by this
 * process's user) beside the final file, so no other user can create a file in it, and a rename
 * from it to the final name stays on one file system and is atomic.
 */
interface PrivateCopy {
  folder: string;
  /** The temporary file, created here (0600) and held open by `fd`. */
  path: string;
  fd: number;
  folderStat: Stats;
  fileStat: Stats;
}

/**
 * Makes the private folder and the empty temporary file in it. SQLite reads a `-wal` or
 * `-journal` it finds beside a database as part of it: in a folder another user can write to,
 * one planted there would be read into the copy (docs/operations.md#backups-and-restore).
 */
function createPrivateCopy(target: string, purpose: string): PrivateCopy {
  const parent = dirname(target);
  if (!lstatIfAny(parent)?.isDirectory()) throw new OperationRefused(`the folder ${parent} does not exist.`);
  const folder = mkdtempSync(join(parent, `.${basename(target)}.${purpose}-`));
  try {
    const folderStat = lstatSync(folder);
    const uid = process.getuid?.();
    // POSIX only: elsewhere there are no such modes to check.
    if (
      !folderStat.isDirectory() ||
      (uid !== undefined && ((folderStat.mode & 0o077) !== 0 || folderStat.uid !== uid))
    ) {
      throw new OperationRefused(`the temporary folder ${folder} is not private to this user; nothing was written.`);
    }
    const path = join(folder, basename(target));
    const fd = openSync(
      path,
      constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | (constants.O_NOFOLLOW ?? 0),
      0o600,
    );
    return { folder, path, fd, folderStat, fileStat: fstatSync(fd) };
  } catch (error) {
    removeFolder(folder);
    throw error;
  }
}

/**
 * Removes a private folder with what it holds: emptied and removed again, a few times, when a
 * file appears in it while it is emptied (ENOTEMPTY), as one planted by another process of the
 * same user would. Each try lists the folder anew: rmSync's own `maxRetries` does not on
 * Node.js 22, where it only retries removing the folder that the new file keeps from going.
 */
function removeFolder(folder: string, tries = 20): void {
  for (let tried = 1; ; tried++) {
    try {
      rmSync(folder, { recursive: true, force: true });
      return;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOTEMPTY' || tried >= tries) throw error;
    }
  }
}

/** Closes the temporary file and removes the private folder with whatever is in it. */
function removePrivateCopy(copy: PrivateCopy) {
  try {
    closeSync(copy.fd);
  } finally {
    removeFolder(copy.folder);
  }
}

/**
 * Refuses to go on when the private folder holds anything but the temporary copy (a `-wal`,
 * `-journal` or `-shm` this process did not leave there), or when the folder or the copy is no
 * longer the one this process created.
 */
function refuseStrangers(copy: PrivateCopy, what: 'backup' | 'restore') {
  const folder = lstatIfAny(copy.folder);
  const file = lstatIfAny(copy.path);
  if (!folder || !sameFile(folder, copy.folderStat) || !file || !sameFile(file, copy.fileStat)) {
    throw new OperationRefused(
      `the ${what}'s temporary copy in ${copy.folder} was replaced by another process; ${ADVICE[what]}`,
    );
  }
  const stranger = readdirSync(copy.folder).find((name) => name !== basename(copy.path));
  if (stranger !== undefined) {
    throw new OperationRefused(
      `${join(copy.folder, stranger)}, which petstore did not create, appeared beside the ${what}'s temporary copy; ` +
        `nothing was written: ${ADVICE[what]}`,
    );
  }
}

/** The companion files (`-wal`, `-journal`, `-shm`) beside `path`, by their names. */
const companionsOf = (path: string) => COMPANIONS.map((suffix) => path + suffix).filter((name) => lstatIfAny(name));

/** Flushes `path` to the disk; a folder too, so a rename or link in it is durable. */
function syncToDisk(path: string) {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Removes a file made here and what SQLite may have left beside it. */
function removeWithCompanions(path: string) {
  for (const suffix of ['', ...COMPANIONS]) rmSync(path + suffix, { force: true });
}

/** The number of animals in an open petstore database. */
const countPets = (db: Database.Database) => Number(db.prepare('SELECT count(*) FROM pets').pluck().get());

/**
 * Marks the database file open as `fd` as one in a rollback-journal mode, as `PRAGMA
 * journal_mode = DELETE` would: bytes 18 and 19 of its header are 2 in WAL mode and 1 otherwise
 * (SQLite's file format, "File format version numbers"). The online backup copies the header of
 * a WAL database as it is; done here, through the descriptor, SQLite never opens the copy again
 * by its name, which would read any `-wal` or `-journal` found beside it.
 */
function markStandAlone(fd: number) {
  const versions = Buffer.alloc(2);
  if (readSync(fd, versions, 0, 2, 18) === 2 && versions[0] === 2 && versions[1] === 2) {
    writeSync(fd, Buffer.from([1, 1]), 0, 2, 18);
  }
}

/**
 * Writes a consistent copy of the SQLite database at `source` to `target` while the service
 * runs and takes writes (docs/operations.md#backups-and-restore), with SQLite's online backup:
 * every commit made before it started is in the copy. The copy is written in a private folder
 * beside `target` (created 0700, so no other user can put a file beside the copy), readable by
 * its owner alone, synced, and then moved into place, so `target` is never half written. Any
 * file that appears beside the copy, or a `-wal`, `-journal` or `-shm` beside `target`, stops
 * it with nothing written. An existing `target` is refused unless `force`.
 *
 * @example await backupSqlite('/var/lib/petstore/petstore.db', '/backups/monday.db') // { path, pets }
 */
export async function backupSqlite(
  source: string,
  target: string,
  { force = false, busyTimeoutMs = 5000 }: { force?: boolean; busyTimeoutMs?: number } = {},
): Promise<{ path: string; pets: number }> {
  const path = resolve(target);
  if (path === resolve(source)) throw new OperationRefused(`${path} is the database itself; name another file.`);
  if (!force && lstatIfAny(path)) throw new OperationRefused(`${path} already exists; add --force to replace it.`);
  if (!existsSync(source))
    throw new OperationRefused(
      `the SQLite database ${resolve(source)} (PETSTORE_DB) does not exist: there is nothing to back up.`,
    );
  const copy = createPrivateCopy(path, 'backup');
  try {
    refuseStrangers(copy, 'backup');
    let pets: number;
    const db = new Database(source, { fileMustExist: true });
    try {
      db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
      // One read transaction for the count and every page: the backup reads in the snapshot the
      // connection already holds, so the number printed is the number in the copy, and writes by
      // the service meanwhile never make the copy start over (SQLite restarts a backup whose
      // source another connection changed between steps).
      db.exec('BEGIN');
      pets = countPets(db);
      await db.backup(copy.path, { progress: () => 0x7fffffff });
      db.exec('COMMIT');
    } finally {
      db.close();
    }
    refuseStrangers(copy, 'backup');
    // A file that stands alone: without it, the copy says WAL, like the database it came from.
    markStandAlone(copy.fd);
    fsyncSync(copy.fd);
    refuseStrangers(copy, 'backup');
    // SQLite would read them with the copy, whoever opens it.
    const [beside] = companionsOf(path);
    if (beside !== undefined) {
      throw new OperationRefused(
        `${beside} exists beside ${path}, and SQLite would read it with the copy: ${ADVICE.backup}`,
      );
    }
    if (force) {
      renameSync(copy.path, path);
    } else {
      // link, not rename: it fails if the name was taken meanwhile, and never replaces a file.
      try {
        linkSync(copy.path, path);
      } catch (error) {
        if (codeOf(error) === 'EEXIST')
          throw new OperationRefused(`${path} already exists; add --force to replace it.`);
        throw error;
      }
    }
    syncToDisk(dirname(path));
    const [appeared] = companionsOf(path);
    if (appeared !== undefined) {
      // Planted as the copy arrived: a copy that would be read with it is no backup to keep.
      const placed = lstatIfAny(path);
      if (placed && sameFile(placed, copy.fileStat)) rmSync(path);
      throw new OperationRefused(
        `${appeared} appeared beside ${path}, and SQLite would read it with the copy: ${ADVICE.backup}`,
      );
    }
    return { path, pets };
  } finally {
    removePrivateCopy(copy);
  }
}

/** What a backup file holds, once checked. */
export interface CheckedCopy {
  pets: number;
  migrations: AppliedMigration[];
}

/** One row of `sqlite_schema`, as SQLite stores it, and a table's columns. */
interface SchemaObject {
  type: string;
  name: string;
  tbl_name: string;
  sql: string | null;
  columns?: string;
}

/** Every table, index, trigger and view of an open database, by type and name. */
function readSchema(db: Database.Database): Map<string, SchemaObject> {
  const rows = db
    .prepare<[], SchemaObject>('SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name')
    .all();
  for (const row of rows) {
    if (row.type !== 'table') continue;
    const columns = db.prepare<[string], { name: string; type: string }>(
      'SELECT name, type FROM pragma_table_xinfo(?)',
    );
    row.columns = columns
      .all(row.name)
      .map((column) => `${column.name} ${column.type}`.trim())
      .join(', ');
  }
  return new Map(rows.map((row) => [`${row.type} ${row.name}`, row]));
}

/**
 * The schema that `recorded`, a petstore database's migrations, make: the service's own
 * `schema_migrations` table (made by opening a store, as `serve` does), then each migration's
 * SQL, in a scratch database in `folder`.
 */
async function expectedSchema(folder: string, recorded: AppliedMigration[]): Promise<Map<string, SchemaObject>> {
  const path = join(folder, 'expected-schema.db');
  try {
    await openSqliteStore(path).close();
    const db = new Database(path, { fileMustExist: true });
    try {
      const known = new Map(readMigrations('sqlite').map((migration) => [migration.version, migration.sql]));
      db.transaction(() => {
        for (const { version } of recorded) db.exec(known.get(version)!);
      })();
      return readSchema(db);
    } finally {
      db.close();
    }
  } finally {
    removeWithCompanions(path);
  }
}

const describeObject = (object: SchemaObject) =>
  object.type === 'index' || object.type === 'trigger'
    ? `${object.type} ${object.name} on ${object.tbl_name}`
    : `${object.type} ${object.name}`;

/** The differences between a copy's schema and the expected one, extra objects first; empty when equal. */
function schemaDifferences(found: Map<string, SchemaObject>, expected: Map<string, SchemaObject>): string[] {
  const extra: string[] = [];
  const changed: string[] = [];
  const missing: string[] = [];
  for (const [key, object] of found) {
    const wanted = expected.get(key);
    if (!wanted) {
      extra.push(`it has ${describeObject(object)}, which they do not make`);
    } else if (object.columns !== wanted.columns) {
      changed.push(
        `its ${object.type} ${object.name} has columns (${object.columns}) where they make (${wanted.columns})`,
      );
    } else if (object.tbl_name !== wanted.tbl_name || object.sql !== wanted.sql) {
      changed.push(`its ${describeObject(object)} is not the one they make`);
    }
  }
  for (const [key, object] of expected) {
    if (!found.has(key)) missing.push(`it lacks ${describeObject(object)}, which they make`);
  }
  return [...extra, ...changed, ...missing];
}

/**
 * Checks the SQLite file at `path`, in the private folder `folder`, as a copy to restore:
 * SQLite's integrity check, then that it is a petstore database whose migrations this version
 * all knows, then that its schema (every table, index, trigger and view, with its SQL) is the
 * one those migrations make, nothing more. Leaves it in WAL mode with no -wal file, as a service
 * that stopped leaves its database, so the service's first start on it changes nothing it would
 * not have. Throws OperationRefused with one line naming what is wrong.
 */
async function checkCopy(path: string, folder: string, shown: string): Promise<CheckedCopy> {
  let db: Database.Database | undefined;
  try {
    db = new Database(path, { fileMustExist: true });
    const problems = db.pragma('integrity_check') as { integrity_check: string }[];
    if (problems.length !== 1 || problems[0]!.integrity_check !== 'ok') {
      const first = String(problems[0]?.integrity_check ?? 'no answer').split('\n')[0];
      throw new OperationRefused(`${shown} is damaged: SQLite's integrity check found ${first}`);
    }
    const migrations = appliedSqliteMigrations(db);
    const tables = db
      .prepare("SELECT name FROM sqlite_schema WHERE type = 'table' AND name IN ('pets', 'api_keys')")
      .pluck()
      .all();
    if (migrations.length === 0 || tables.length !== 2) {
      throw new OperationRefused(
        `${shown} is a SQLite database but not a petstore one (no petstore migrations in it).`,
      );
    }
    const known = readMigrations('sqlite');
    const [unknown] = unknownMigrations(known, migrations);
    if (unknown !== undefined) {
      throw new OperationRefused(
        `${shown} holds migration ${unknown}, which this version of petstore does not know; restore it with the release that made it.`,
      );
    }
    // Every release applies its migrations in order, all of them: a database records the first n.
    const gap = known.slice(0, migrations.length).find((migration, i) => migrations[i]!.version !== migration.version);
    if (gap !== undefined) {
      throw new OperationRefused(
        `${shown} records later migrations without ${gap.name}, which no petstore release makes.`,
      );
    }
    const differences = schemaDifferences(readSchema(db), await expectedSchema(folder, migrations));
    if (differences.length > 0) {
      const more = differences.length - 1;
      throw new OperationRefused(
        `${shown} does not have the schema its migrations (${migrations.at(-1)!.name} and before) make: ` +
          `${differences[0]}${more > 0 ? ` (and ${more} more difference${more === 1 ? '' : 's'})` : ''}.`,
      );
    }
    db.pragma('journal_mode = WAL');
    return { pets: countPets(db), migrations };
  } catch (error) {
    if (error instanceof OperationRefused) throw error;
    const code = codeOf(error);
    if (code === 'SQLITE_NOTADB') throw new OperationRefused(`${shown} is not a SQLite database.`);
    if (code.startsWith('SQLITE_CORRUPT')) {
      throw new OperationRefused(`${shown} is damaged: ${(error as Error).message.split('\n')[0]}.`);
    }
    throw error;
  } finally {
    db?.close();
  }
}

/** Copies the bytes of `from` into the empty file open as `fd`, and syncs it. */
function copyBytes(from: string, fd: number) {
  const input = openSync(from, 'r');
  try {
    const buffer = Buffer.allocUnsafe(1 << 20);
    let at = 0;
    for (let read; (read = readSync(input, buffer, 0, buffer.length, null)) > 0;) {
      for (let written = 0; written < read;) {
        const n = writeSync(fd, buffer, written, read - written, at);
        written += n;
        at += n;
      }
    }
    fsyncSync(fd);
  } finally {
    closeSync(input);
  }
}

/**
 * Refuses a copy with changes beside it that are not in the file: a non-empty `-wal` (commits
 * not yet checkpointed) or `-journal` (a write half done). Only the file is restored, so they
 * would be lost, or worse, half applied.
 */
function refuseUnfolded(from: string) {
  for (const suffix of ['-wal', '-journal']) {
    const companion = lstatIfAny(from + suffix);
    if (companion && companion.size > 0) {
      throw new OperationRefused(
        `${from}${suffix} holds changes that are not in ${from} yet; with no process using it, write a copy that ` +
          `stands alone with 'PETSTORE_DB=${from} petstore backup <new file>' and restore that.`,
      );
    }
  }
}

/**
 * The file a restore replaces for the database named `target`: the file itself, or, when
 * `target` is a symbolic link, the file it points to (the link stays, as SQLite itself opens the
 * file through it and keeps the -wal beside the file). A link that points nowhere is refused.
 */
function fileToReplace(target: string, shown: string): string {
  const stat = lstatIfAny(target);
  if (stat?.isSymbolicLink()) {
    try {
      return realpathSync(target);
    } catch (error) {
      if (codeOf(error) !== 'ENOENT') throw error;
      throw new OperationRefused(
        `${shown} is a symbolic link to a file that does not exist; point it at the database, or remove it, and restore again.`,
      );
    }
  }
  if (stat) return realpathSync(target);
  if (!lstatIfAny(dirname(target))) throw new OperationRefused(`the folder ${dirname(target)} does not exist.`);
  // The folder resolved, so the private folder and the rename are where the file will be.
  return join(realpathSync(dirname(target)), basename(target));
}

/**
 * Takes the database at `path` for this process alone, with SQLite's own lock: every petstore
 * process that has the file open (a service, a keys command) keeps a shared lock on it for as
 * long as it does (WAL mode), so the exclusive lock is refused while any of them runs. Taking
 * it folds the write-ahead log into the file and removes it, so no -wal of the old database can
 * ever be read with the new one. Returns the connection that holds the lock.
 */
function lockUnused(path: string, shown: string): Database.Database {
  const db = new Database(path, { fileMustExist: true });
  try {
    db.pragma('busy_timeout = 0');
    // Before the first read: the connection then takes the file lock exclusively and keeps it.
    db.pragma('locking_mode = EXCLUSIVE');
    db.pragma('journal_mode = DELETE');
    db.exec('BEGIN EXCLUSIVE; COMMIT');
    return db;
  } catch (error) {
    db.close();
    if (isBusy(error)) {
      throw new OperationRefused(
        `${shown} is in use: another process has it open (SQLite refused this process an exclusive lock on the file, ` +
          'which every petstore service and command holds a share of while it runs); stop it and restore again.',
      );
    }
    // SQLite locks a file it can read as a database only: whether one is using it cannot be told.
    if (codeOf(error) === 'SQLITE_NOTADB' || codeOf(error).startsWith('SQLITE_CORRUPT')) {
      throw new OperationRefused(
        `${shown} cannot be read as a SQLite database, so whether a process uses it cannot be told; ` +
          'once no service runs, move it aside (with any -wal and -shm files) and restore again.',
      );
    }
    throw error;
  }
}

/** The id counters of an open database (its AUTOINCREMENT tables' sqlite_sequence rows); none when it has none. */
function readCounters(db: Database.Database): Map<string, bigint> {
  const table = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'sqlite_sequence'").get();
  if (!table) return new Map();
  const rows = db
    .prepare<[], { name: string; seq: number | bigint }>('SELECT name, seq FROM sqlite_sequence')
    .safeIntegers(true)
    .all();
  return new Map(rows.map((row) => [row.name, BigInt(row.seq)]));
}

/**
 * Moves the id counters of the copy at `path` forward (docs/operations.md#ids-after-a-restore),
 * so the restored database gives out no id that the one it replaces gave out: each counter to
 * at least that database's (`replaced`, when there is one: pets, keys, webhook endpoints), and
 * the events' to the clock floor of `now` (ids.ts, clockFloorAt), above every event id given out
 * before, by any database, even one that is gone. A counter for a table the copy's migrations
 * have not made yet is kept for the migration that makes it.
 */
function carryCountersForward(path: string, replaced: Database.Database | undefined, now: number) {
  const counters = replaced ? readCounters(replaced) : new Map<string, bigint>();
  const floor = clockFloorAt(now) - 1n;
  if ((counters.get('events') ?? 0n) < floor) counters.set('events', floor);
  const db = new Database(path, { fileMustExist: true });
  try {
    const raise = db.prepare('UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?');
    const insert = db.prepare('INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)');
    db.transaction(() => {
      for (const [name, seq] of counters) {
        if (raise.run(seq, name).changes === 0) insert.run(name, seq);
      }
    })();
  } finally {
    db.close();
  }
}

/**
 * Puts the copy at `source` in place of the SQLite database at `target`, atomically
 * (docs/operations.md#backups-and-restore): the copy is taken in a private folder beside the
 * database file and checked there (integrity, petstore migrations this version knows, and the
 * schema those migrations make, nothing more), its id counters carried forward past those of
 * the database it replaces and, for events, past the time `now` (carryCountersForward), synced,
 * and renamed over the file while this process holds the database's exclusive lock, so a
 * database in use is refused. A `target` that
 * is a symbolic link is followed: the file it points to is replaced and the link stays. A
 * refused copy leaves the database as it was. Resolves to what the copy holds and the file
 * replaced.
 */
export async function restoreSqlite(
  source: string,
  target: string,
  shownTarget = resolve(target),
  { now = Date.now() }: { now?: number } = {},
): Promise<CheckedCopy & { path: string }> {
  const from = resolve(source);
  if (!existsSync(from) || !statSync(from).isFile()) throw new OperationRefused(`${from} does not exist.`);
  const to = fileToReplace(resolve(target), shownTarget);
  const current = lstatIfAny(to);
  if (from === to || (current && sameFile(statSync(from), current))) {
    throw new OperationRefused(`${from} is the database itself; name a backup file.`);
  }
  refuseUnfolded(from);
  const copy = createPrivateCopy(to, 'restore');
  try {
    copyBytes(from, copy.fd);
    // Written to while it was copied: what was copied may be half of it.
    refuseUnfolded(from);
    refuseStrangers(copy, 'restore');
    const checked = await checkCopy(copy.path, copy.folder, from);
    const lock = current ? lockUnused(to, shownTarget) : undefined;
    try {
      carryCountersForward(copy.path, lock, now);
      fsyncSync(copy.fd);
      refuseStrangers(copy, 'restore');
      // Left by a process that crashed; the lock above shows no process uses them.
      for (const suffix of COMPANIONS) rmSync(to + suffix, { force: true });
      renameSync(copy.path, to);
      syncToDisk(dirname(to));
    } finally {
      lock?.close();
    }
    return { ...checked, path: to };
  } finally {
    removePrivateCopy(copy);
  }
}
