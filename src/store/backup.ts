import { randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  openSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeSync,
} from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import Database from 'better-sqlite3';
import { readMigrations, unknownMigrations, type AppliedMigration } from './migrations.js';
import { appliedSqliteMigrations } from './sqlite.js';

/** A backup or restore that was refused or failed; its message is one line, for the operator. */
export class OperationRefused extends Error {}

const codeOf = (error: unknown) => String((error as { code?: unknown }).code);
const isBusy = (error: unknown) => codeOf(error).startsWith('SQLITE_BUSY') || codeOf(error).startsWith('SQLITE_LOCKED');

/** A new, empty file beside `target`, created readable by its owner alone (0600), never an existing one. */
function createBeside(target: string, purpose: string): string {
  if (!existsSync(dirname(target))) throw new OperationRefused(`the folder ${dirname(target)} does not exist.`);
  const path = join(dirname(target), `.${basename(target)}.${purpose}-${randomBytes(6).toString('hex')}.tmp`);
  closeSync(openSync(path, 'wx', 0o600));
  return path;
}

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
  for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(path + suffix, { force: true });
}

/** The number of animals in an open petstore database. */
const countPets = (db: Database.Database) => Number(db.prepare('SELECT count(*) FROM pets').pluck().get());

/**
 * Writes a consistent copy of the SQLite database at `source` to `target` while the service
 * runs and takes writes (docs/operations.md#backups-and-restore), with SQLite's online backup: every commit made
 * before it started is in the copy. The copy is created readable by its owner alone, written
 * beside `target`, synced and then moved into place, so `target` is never half written. An
 * existing `target` is refused unless `force`.
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
  if (!force && existsSync(path)) throw new OperationRefused(`${path} already exists; add --force to replace it.`);
  if (!existsSync(source))
    throw new OperationRefused(
      `the SQLite database ${resolve(source)} (PETSTORE_DB) does not exist: there is nothing to back up.`,
    );
  const temporary = createBeside(path, 'backup');
  try {
    const db = new Database(source, { fileMustExist: true });
    try {
      db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
      // All pages in one step: one read transaction, one snapshot, so writes by the service
      // meanwhile never make the copy start over (SQLite restarts a backup whose source another
      // connection changed between steps).
      await db.backup(temporary, { progress: () => 0x7fffffff });
    } finally {
      db.close();
    }
    const copy = new Database(temporary, { fileMustExist: true });
    let pets: number;
    try {
      // A file that stands alone: without it, the copy says WAL, like the database it came from.
      copy.pragma('journal_mode = DELETE');
      pets = countPets(copy);
    } finally {
      copy.close();
    }
    syncToDisk(temporary);
    if (force) {
      renameSync(temporary, path);
    } else {
      // link, not rename: it fails if the name was taken meanwhile, and never replaces a file.
      try {
        linkSync(temporary, path);
      } catch (error) {
        if (codeOf(error) === 'EEXIST')
          throw new OperationRefused(`${path} already exists; add --force to replace it.`);
        throw error;
      }
      rmSync(temporary);
    }
    syncToDisk(dirname(path));
    return { path, pets };
  } finally {
    removeWithCompanions(temporary);
  }
}

/** What a backup file holds, once checked. */
export interface CheckedCopy {
  pets: number;
  migrations: AppliedMigration[];
}

/**
 * Checks the SQLite file at `path` as a copy to restore: SQLite's integrity check, then that it
 * is a petstore database whose migrations this version all knows. Leaves it in WAL mode with
 * no -wal file, as a service that stopped leaves its database, so the service's first start on
 * it changes nothing it would not have. Throws OperationRefused with one line naming what is wrong.
 */
function checkCopy(path: string, shown: string): CheckedCopy {
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
    const [unknown] = unknownMigrations(readMigrations('sqlite'), migrations);
    if (unknown !== undefined) {
      throw new OperationRefused(
        `${shown} holds migration ${unknown}, which this version of petstore does not know; restore it with the release that made it.`,
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

/** Copies the bytes of `from` into the empty file `to`. */
function copyBytes(from: string, to: string) {
  const input = openSync(from, 'r');
  const output = openSync(to, 'r+');
  try {
    const buffer = Buffer.allocUnsafe(1 << 20);
    for (let read; (read = readSync(input, buffer, 0, buffer.length, null)) > 0;) {
      for (let written = 0; written < read;) written += writeSync(output, buffer, written, read - written);
    }
    fsyncSync(output);
  } finally {
    closeSync(input);
    closeSync(output);
  }
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

/**
 * Puts the copy at `source` in place of the SQLite database at `target`, atomically
 * (docs/operations.md#backups-and-restore): the copy is checked (integrity, petstore migrations this version knows), written
 * beside the target, synced, and renamed over it while this process holds the database's
 * exclusive lock, so a database in use is refused. A refused copy leaves the database as it was.
 */
export function restoreSqlite(source: string, target: string, shownTarget = resolve(target)): CheckedCopy {
  const from = resolve(source);
  const to = resolve(target);
  if (!existsSync(from) || !statSync(from).isFile()) throw new OperationRefused(`${from} does not exist.`);
  if (from === to) throw new OperationRefused(`${from} is the database itself; name a backup file.`);
  const temporary = createBeside(to, 'restore');
  try {
    copyBytes(from, temporary);
    const checked = checkCopy(temporary, from);
    syncToDisk(temporary);
    const lock = existsSync(to) ? lockUnused(to, shownTarget) : undefined;
    try {
      // Left by a process that crashed; the lock above shows no process uses them.
      for (const suffix of ['-wal', '-shm', '-journal']) rmSync(to + suffix, { force: true });
      renameSync(temporary, to);
      syncToDisk(dirname(to));
    } finally {
      lock?.close();
    }
    return checked;
  } finally {
    removeWithCompanions(temporary);
  }
}
