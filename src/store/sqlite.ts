import { closeSync, existsSync, mkdirSync, openSync } from 'node:fs';
import { dirname } from 'node:path';
import Database from 'better-sqlite3';
import { systemClock, type Clock } from '../clock.js';
import { processCounts } from './process-counts.js';
import { groupCommits, retrying, type RetryOptions } from './group-commit.js';
import { readMigrations, refuseUnknownMigrations, type AppliedMigration } from './migrations.js';
import { readTurns } from './read-turns.js';
import { sqliteWebhooks } from './sqlite-webhooks.js';
import type { PetStatus } from '../schemas.js';
import {
  ACTIVE_KEY_COLUMNS,
  countByStatus,
  EXPIRED_PER_CREATE,
  idempotencyValues,
  KEY_COLUMNS,
  petJson,
  toEvent,
  refuseRoll,
  replayFor,
  toActiveKey,
  toKey,
  writeScopes,
  type ActiveKeyRow,
  type EventRow,
  type IdempotencyRow,
  type KeyRow,
} from './rows.js';
import {
  StoreUnavailableError,
  type EventQuery,
  type IdempotencyClaim,
  type KeyRoll,
  type KeyUse,
  type ListQuery,
  type NewKeyRecord,
  type NewPetRecord,
  type OnceOutcome,
  type PetRecord,
  type RollOutcome,
  type Store,
  type StoredResponse,
} from './store.js';

/** A `pets` row read in raw mode (an array: no object per row to build): id, name, category_id, status. */
type PetTuple = [bigint, string, bigint, PetRecord['status']];

/**
 * The two page queries, compiled once. SQLite reads the value bound to a parameter when it plans
 * with it, and then marks the statement to be compiled again whenever that parameter is bound
 * anew, which better-sqlite3 does on every call: a LIMIT written `?` (SQLite 3.54 sizes the plan
 * to it) and, in a build with STAT4 such as better-sqlite3's, an indexed column compared with `?`
 * (row estimates). `+?` is an expression the planner does not look into; the plan is the same.
 * (The connection-wide switch, SQLITE_DBCONFIG_ENABLE_QPSG, is not reachable through
 * better-sqlite3; the store's other statements are not compiled again: unique lookups and literals.)
 */
export const LIST_ALL = 'SELECT id, name, category_id, status FROM pets WHERE id > ? ORDER BY id LIMIT +?';
export const LIST_BY_STATUS =
  'SELECT id, name, category_id, status FROM pets WHERE status = +? AND id > ? ORDER BY id LIMIT +?';
/** The feed's page, its LIMIT written as the pages' are. Writers take turns: seq is commit order, tx always 0. */
export const LIST_EVENTS =
  'SELECT 0 AS tx, seq, type, created_at, data FROM events WHERE seq > ? ORDER BY seq LIMIT +?';

const fromTuple = (row: PetTuple): PetRecord => ({ id: row[0], name: row[1], categoryId: row[2], status: row[3] });

/** A createPetOnce call, as the group commit writes it. */
interface OnceCreate {
  pet: NewPetRecord;
  claim: IdempotencyClaim;
  respond: (pet: PetRecord) => StoredResponse;
}

// How long a statement waits, blocking the process, for a lock another process holds: a few
// milliseconds, as long as a short write takes. Longer waits are asynchronous retries (retrying,
// groupCommits), so however many requests wait, the thread stays free for the others.
const BUSY_WAIT_MS = 5;

const codeOf = (error: unknown) => String((error as { code?: unknown }).code);
const isBusy = (error: unknown) => codeOf(error).startsWith('SQLITE_BUSY');
// The file cannot grow (a full disk, or the size max_page_count allows) or cannot be read or written.
const isDiskError = (error: unknown) => codeOf(error) === 'SQLITE_FULL' || codeOf(error).startsWith('SQLITE_IOERR');

/**
 * Creates `folder` and the missing folders above it (0700), one at a time. Not `mkdirSync`'s
 * `recursive`: on a file system that refuses a folder with ENOENT while its parent exists (a
 * path under /proc) it retries for ever; here each folder is tried once, so a path that cannot
 * be made fails with that folder's error.
 */
function createFolders(folder: string) {
  const missing: string[] = [];
  for (let at = folder; !existsSync(at); at = dirname(at)) {
    // The root always exists; the guard keeps the walk finite whatever existsSync answers.
    if (dirname(at) === at) break;
    missing.unshift(at);
  }
  for (const each of missing) {
    try {
      mkdirSync(each, { mode: 0o700 });
    } catch (error) {
      if ((error as { code?: unknown }).code !== 'EEXIST') throw error;
    }
  }
}

/**
 * Creates the folders up to `path` and the empty file, when missing, readable by their owner
 * alone (0700, 0600): the file holds key hashes and every animal. SQLite gives the -wal and -shm
 * files it creates beside it the file's own permissions. Existing ones are left as they are.
 */
function createOwnerOnly(path: string) {
  createFolders(dirname(path));
  try {
    closeSync(openSync(path, 'wx', 0o600));
  } catch (error) {
    if ((error as { code?: unknown }).code !== 'EEXIST') throw error;
  }
}

/** The page cache of the connection that counts the events waiting, in KiB. */
const COUNTING_CACHE_KIB = 256;

/**
 * Opens (creating when missing) the SQLite file at `path`.
 * WAL with synchronous=FULL: a commit is on disk, power loss included, before a 201 leaves.
 * A call waits up to `busyTimeoutMs` for another process's lock, asynchronously: the process
 * blocks a few milliseconds at most, then retries later; past it, StoreUnavailableError.
 */
export function openSqliteStore(
  path: string,
  {
    busyTimeoutMs = 5000,
    clock = systemClock,
    maxPageCount,
  }: {
    busyTimeoutMs?: number;
    /** The time an event is stamped with (its createdAt), which retention compares. */
    clock?: Clock;
    /** Most pages the file may have (PRAGMA max_page_count): past it, writes fail as on a full disk. */
    maxPageCount?: number;
  } = {},
): Store {
  if (path !== ':memory:') createOwnerOnly(path);
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.pragma(`busy_timeout = ${BUSY_WAIT_MS}`);
  if (maxPageCount !== undefined) db.pragma(`max_page_count = ${Math.trunc(maxPageCount)}`);
  db.defaultSafeIntegers(true);

  db.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
    version INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    applied_at TEXT NOT NULL
  ) STRICT`);

  // Prepared once the tables exist: see migrate().
  let statements: ReturnType<typeof prepare> | undefined;
  const prepare = () => ({
    insertPet: db.prepare('INSERT INTO pets (name, category_id, status) VALUES (?, ?, ?)'),
    deletePet: db.prepare('DELETE FROM pets WHERE id = ?'),
    insertEvent: db.prepare('INSERT INTO events (type, created_at, data) VALUES (?, ?, ?)'),
    deleteEvent: db.prepare('DELETE FROM events WHERE seq = ?'),
    listEvents: db.prepare<[bigint, number], EventRow>(LIST_EVENTS),
    // Among the `limit` oldest only: the work is bounded whatever the table holds.
    pruneEvents: db.prepare(
      'DELETE FROM events WHERE seq IN (SELECT seq FROM events ORDER BY seq LIMIT +?) AND created_at < ?',
    ),
    getPet: db.prepare<[bigint], PetTuple>('SELECT id, name, category_id, status FROM pets WHERE id = ?').raw(true),
    listAll: db.prepare<[bigint, number], PetTuple>(LIST_ALL).raw(true),
    listByStatus: db.prepare<[string, bigint, number], PetTuple>(LIST_BY_STATUS).raw(true),
    // Kept by triggers (migration 004): three rows, whatever the number of animals.
    countByStatus: db.prepare<[], { status: PetStatus; count: bigint }>('SELECT status, count FROM pet_counts'),
    findIdempotency: db.prepare<[bigint, string], IdempotencyRow>(
      'SELECT fingerprint, response_status, response_body, response_location, expires_at FROM idempotency_keys ' +
        'WHERE api_key_id = ? AND key = ?',
    ),
    deleteIdempotency: db.prepare('DELETE FROM idempotency_keys WHERE api_key_id = ? AND key = ?'),
    deleteExpiredIdempotency: db.prepare(
      'DELETE FROM idempotency_keys WHERE rowid IN ' +
        `(SELECT rowid FROM idempotency_keys WHERE expires_at <= ? LIMIT ${EXPIRED_PER_CREATE})`,
    ),
    insertIdempotency: db.prepare(
      'INSERT INTO idempotency_keys (api_key_id, key, fingerprint, response_status, response_body, ' +
        'response_location, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    insertKey: db.prepare(
      'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) VALUES (?, ?, ?, ?, ?, ?)',
    ),
    findKey: db.prepare<[Buffer], ActiveKeyRow>(
      `SELECT ${ACTIVE_KEY_COLUMNS} FROM api_keys WHERE hash = ? AND revoked_at IS NULL`,
    ),
    listKeys: db.prepare<[], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY id`),
    getKey: db.prepare<[bigint], KeyRow>(`SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = ?`),
    revokeKey: db.prepare('UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL'),
    insertFirstKey: db.prepare(
      'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) SELECT ?, ?, ?, ?, ?, ? ' +
        'WHERE NOT EXISTS (SELECT 1 FROM api_keys)',
    ),
    insertSuccessor: db.prepare(
      'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) ' +
        'SELECT name, ?, ?, ?, scopes, ? FROM api_keys WHERE id = ?',
    ),
    // ISO 8601 text in UTC sorts as time does, so min() and < compare instants.
    replaceKey: db.prepare(
      'UPDATE api_keys SET replaced_by = ?, expires_at = min(coalesce(expires_at, ?), ?) ' +
        'WHERE id = ? AND replaced_by IS NULL AND revoked_at IS NULL',
    ),
    noteKeyUse: db.prepare(
      'UPDATE api_keys SET last_used_at = ? WHERE id = ? AND (last_used_at IS NULL OR last_used_at < ?)',
    ),
    noteDeprecatedUse: db.prepare(
      'UPDATE api_keys SET last_deprecated_use_at = ? WHERE id = ? ' +
        'AND (last_deprecated_use_at IS NULL OR last_deprecated_use_at < ?)',
    ),
  });
  const ready = () => {
    if (!statements) throw new Error('the SQLite store is used before migrate()');
    return statements;
  };
  // The turn's read transaction (readTurns): open for a read, ended before a write, which then
  // commits on its own. Statements come through these two; the group commit, the key-use batches,
  // migrate and close end it themselves.
  const reads = readTurns(db);
  const forReading = () => {
    const s = ready();
    reads.begin();
    return s;
  };
  const forWriting = () => {
    const s = ready();
    reads.end();
    return s;
  };
  // docs/api.md#limits: a call that cannot get a lock another process holds gets
  // StoreUnavailableError (503) PETSTORE_DB_TIMEOUT_MS after it was first refused, and never
  // blocks the thread for more than one BUSY_WAIT_MS per try meanwhile. Every Store method that
  // reads or writes the file goes through this once, or through the group commit, which retries
  // the same way: one deadline per call, never a retry around a retry. (The key-use batches and
  // probeWrite try once: the next batch or ping tries again.) Each `work` takes what it needs
  // anew (forReading, forWriting) on every try, since a try may come in a later turn.
  const busyRetry: RetryOptions = {
    when: isBusy,
    timeoutMs: busyTimeoutMs,
    exhausted: (error) => new StoreUnavailableError(error),
  };
  const whileBusy = <T>(work: () => T): T | Promise<T> => retrying(work, busyRetry);
  const writeKeyUses = db.transaction((column: 'noteKeyUse' | 'noteDeprecatedUse', uses: KeyUse[]) => {
    for (const { id, at } of uses) {
      const time = new Date(at).toISOString();
      ready()[column].run(time, BigInt(id), time);
    }
  });
  // Off the request path, so it must not block it either: a write lock another process holds
  // makes this batch fail at once (and be retried with the next one) rather than wait busy_timeout.
  const writeUses = async (column: 'noteKeyUse' | 'noteDeprecatedUse', uses: KeyUse[]) => {
    reads.end();
    db.pragma('busy_timeout = 0');
    try {
      writeKeyUses.immediate(column, uses);
    } finally {
      db.pragma(`busy_timeout = ${BUSY_WAIT_MS}`);
    }
  };
  const keyListeners: (() => void)[] = [];
  const keysChanged = () => keyListeners.forEach((listener) => listener());
  const newKeyValues = (key: NewKeyRecord) =>
    [
      key.name,
      key.hint,
      key.hash,
      key.createdAt.toISOString(),
      writeScopes(key.scopes),
      key.expiresAt?.toISOString() ?? null,
    ] as const;
  const insertPet = (pet: NewPetRecord): PetRecord => {
    const { lastInsertRowid } = ready().insertPet.run(pet.name, pet.categoryId, pet.status);
    return { id: BigInt(lastInsertRowid), ...pet };
  };
  // The outbox (docs/events.md): the event is written after its animal, in the same transaction.
  const insertEvent = (pet: PetRecord) =>
    ready().insertEvent.run('pet.created', new Date(clock.now()).toISOString(), petJson(pet)).lastInsertRowid;
  // Two statements: better-sqlite3 makes it a SAVEPOINT inside the group's transaction, so an
  // animal is never stored without its event, nor an event without its animal.
  const createOne = db.transaction((pet: NewPetRecord): PetRecord => {
    const created = insertPet(pet);
    insertEvent(created);
    return created;
  });
  // Called inside the group's IMMEDIATE transaction, so better-sqlite3 makes it a SAVEPOINT: the
  // check and the insert hold the write lock together (two processes on one file cannot both
  // find the key unused), and a claim that fails is undone alone; a replay or a mismatch is an
  // outcome of its own, the other creates of the group are written all the same.
  const createOnce = db.transaction(({ pet, claim, respond }: OnceCreate): OnceOutcome => {
    const s = ready();
    const apiKeyId = BigInt(claim.apiKeyId);
    s.deleteExpiredIdempotency.run(claim.now);
    const row = s.findIdempotency.get(apiKeyId, claim.key);
    const replay = replayFor(row, claim);
    if (replay) return replay;
    if (row) s.deleteIdempotency.run(apiKeyId, claim.key);
    const created = insertPet(pet);
    insertEvent(created);
    const response = respond(created);
    s.insertIdempotency.run(apiKeyId, ...idempotencyValues(claim, response));
    return { kind: 'created', response };
  });
  // Creates with and without an Idempotency-Key, made in one turn, share one transaction and one
  // fsync, and wait for a lock together: one try per pause however many are waiting.
  // Who hears of each commit that wrote events: the relay, which then looks for work at once
  // (docs/webhooks.md#the-relay).
  const eventListeners = new Set<() => void>();
  const creates = groupCommits(
    db,
    (create: NewPetRecord | OnceCreate): PetRecord | OnceOutcome =>
      'claim' in create ? createOnce(create) : createOne(create),
    {
      oneStatementEach: true,
      retry: busyRetry,
      beforeWrite: reads.end,
      afterCommit: () => eventListeners.forEach((listener) => listener()),
    },
  );

  // The connection /metrics counts the events waiting on (docs/webhooks.md#the-relay), opened
  // when first needed: the count reads every one of them, and through `db` it would fill that
  // connection's page cache (16 MB) with them, pushing out what the API reads. This one keeps
  // COUNTING_CACHE_KIB; the rest of what it reads stays in the operating system's file cache.
  let counter: Database.Database | undefined;
  const counting = () => {
    if (path === ':memory:') return db;
    if (!counter) {
      counter = new Database(path, { readonly: true, fileMustExist: true });
      counter.pragma(`cache_size = -${COUNTING_CACHE_KIB}`);
      counter.pragma(`busy_timeout = ${BUSY_WAIT_MS}`);
      counter.defaultSafeIntegers(true);
    }
    return counter;
  };

  // A write that reaches the disk as a create does, an animal and its event (it costs an id and
  // a sequence number, never shown): see InstrumentedStore.
  const probeWrite = async () => {
    const s = forWriting();
    db.transaction(() => {
      const pet = insertPet({ name: 'write probe', categoryId: 0n, status: 'available' });
      s.deleteEvent.run(insertEvent(pet));
      s.deletePet.run(pet.id);
    }).immediate();
  };

  const store: Store = {
    idsVisibleInOrder: true,
    webhooks: sqliteWebhooks(db, {
      whileBusy,
      beforeWrite: reads.end,
      counting,
      eventsWritten: (listener) => {
        eventListeners.add(listener);
        return () => eventListeners.delete(listener);
      },
    }),
    isDiskError,
    probeWrite,
    // One process uses a SQLite file: the counts are this process's own.
    addHits: processCounts(),

    async migrate(onApplied?: (name: string, ms: number) => void) {
      const names: string[] = [];
      reads.end();
      // IMMEDIATE: a second process migrating at the same moment waits instead of racing, then
      // reads what the first applied.
      const applyAll = db.transaction(() => {
        const rows = db
          .prepare<[], { version: bigint; name: string }>('SELECT version, name FROM schema_migrations')
          .all();
        const known = readMigrations('sqlite');
        // Before anything is written: a newer release's database is left as it is.
        refuseUnknownMigrations(
          known,
          rows.map((row) => ({ version: Number(row.version), name: row.name })),
        );
        const applied = new Set(rows.map((row) => Number(row.version)));
        for (const migration of known) {
          if (applied.has(migration.version)) continue;
          const started = performance.now();
          db.exec(migration.sql);
          db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
            migration.version,
            migration.name,
            new Date().toISOString(),
          );
          names.push(migration.name);
          onApplied?.(migration.name, performance.now() - started);
        }
      });
      await whileBusy(() => {
        reads.end();
        applyAll.immediate();
      });
      statements = prepare();
      return names;
    },

    async ping() {
      db.prepare('SELECT 1').get();
    },

    // Resolves once the transaction holding it committed: see groupCommits.
    async createPet(pet: NewPetRecord) {
      ready();
      // insertPet's answer: a NewPetRecord is never taken for a claim.
      return creates.call(pet) as Promise<PetRecord>;
    },

    // Resolves once the transaction holding it committed, as createPet.
    async createPetOnce(
      pet: NewPetRecord,
      claim: IdempotencyClaim,
      respond: (pet: PetRecord) => StoredResponse,
    ): Promise<OnceOutcome> {
      ready();
      return creates.call({ pet, claim, respond }) as Promise<OnceOutcome>;
    },

    // better-sqlite3 reads synchronously: the row itself, a promise only while a lock is waited
    // for (whileBusy) or for a failure (Read).
    getPet(id: bigint) {
      try {
        return whileBusy(() => {
          const row = forReading().getPet.get(id);
          return row && fromTuple(row);
        });
      } catch (error) {
        return Promise.reject(error);
      }
    },

    listPets({ status, afterId = 0n, limit }: ListQuery) {
      try {
        return whileBusy(() => {
          const s = forReading();
          const rows = status ? s.listByStatus.all(status, afterId, limit) : s.listAll.all(afterId, limit);
          return rows.map(fromTuple);
        });
      } catch (error) {
        return Promise.reject(error);
      }
    },

    async countPetsByStatus() {
      return whileBusy(() => countByStatus(forReading().countByStatus.all()));
    },

    // Writers take turns, so seq is commit order: every event is visible once listed after.
    async listEvents({ after, limit }: EventQuery) {
      // A position with a transaction id was never issued here: it sorts after every event.
      if (after && after.tx !== 0n) return [];
      return whileBusy(() =>
        forReading()
          .listEvents.all(after?.seq ?? 0n, limit)
          .map(toEvent),
      );
    },

    // Background work: like the key-use batches, it never waits for a lock another process
    // holds (busy_timeout 0); refused, it is tried again at the next round.
    async pruneEvents(before: Date, limit: number) {
      const s = forWriting();
      db.pragma('busy_timeout = 0');
      try {
        return s.pruneEvents.run(limit, before.toISOString()).changes;
      } finally {
        db.pragma(`busy_timeout = ${BUSY_WAIT_MS}`);
      }
    },

    async createKey(key: NewKeyRecord) {
      return whileBusy(() => {
        const s = forWriting();
        const { lastInsertRowid } = s.insertKey.run(...newKeyValues(key));
        return toKey(s.getKey.get(BigInt(lastInsertRowid))!);
      });
    },

    async findActiveKey(hash: Buffer) {
      return whileBusy(() => {
        const row = forReading().findKey.get(hash);
        return row && toActiveKey(row);
      });
    },

    writeKeyUses: (uses: KeyUse[]) => writeUses('noteKeyUse', uses),
    writeDeprecatedUses: (uses: KeyUse[]) => writeUses('noteDeprecatedUse', uses),

    async listKeys() {
      return whileBusy(() => forReading().listKeys.all().map(toKey));
    },

    async rollKey({ id, successor, oldExpiresAt, at }: KeyRoll): Promise<RollOutcome> {
      // IMMEDIATE: rolls from two processes take turns; the second finds replaced_by set.
      const roll = db.transaction((): RollOutcome => {
        const s = ready();
        const refused = refuseRoll(s.getKey.get(BigInt(id)), at);
        if (refused) return refused;
        const { lastInsertRowid } = s.insertSuccessor.run(
          successor.hint,
          successor.hash,
          successor.createdAt.toISOString(),
          successor.expiresAt?.toISOString() ?? null,
          BigInt(id),
        );
        const ends = oldExpiresAt.toISOString();
        // Rolls back the successor too; the check above, under the write lock, makes it unreachable.
        if (s.replaceKey.run(lastInsertRowid, ends, ends, BigInt(id)).changes === 0) throw new Error('roll raced');
        const old = toKey(s.getKey.get(BigInt(id))!);
        return { kind: 'rolled', old, successor: toKey(s.getKey.get(BigInt(lastInsertRowid))!) };
      });
      return whileBusy(() => {
        forWriting();
        keysChanged();
        return roll.immediate();
      });
    },

    async revokeKey(id: number, at: Date) {
      return whileBusy(() => {
        const s = forWriting();
        keysChanged();
        return s.revokeKey.run(at.toISOString(), BigInt(id)).changes > 0;
      });
    },

    onKeysChanged(listener: () => void) {
      keyListeners.push(listener);
    },

    async createFirstKey(key: NewKeyRecord) {
      return whileBusy(() => {
        const s = forWriting();
        const { changes, lastInsertRowid } = s.insertFirstKey.run(...newKeyValues(key));
        return changes > 0 ? toKey(s.getKey.get(BigInt(lastInsertRowid))!) : undefined;
      });
    },

    async close() {
      reads.end();
      if (statements) creates.flush();
      counter?.close();
      db.close();
    },
  };
  return store;
}

/** The migrations applied to an open SQLite database; none when it has no `schema_migrations` table. */
export function appliedSqliteMigrations(db: Database.Database): AppliedMigration[] {
  const table = db.prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'schema_migrations'").get();
  if (!table) return [];
  return db
    .prepare<[], { version: number | bigint; name: string; applied_at: string }>(
      'SELECT version, name, applied_at FROM schema_migrations ORDER BY version',
    )
    .all()
    .map((row) => ({ version: Number(row.version), name: row.name, appliedAt: new Date(row.applied_at) }));
}

/**
 * The migrations applied to the SQLite file at `path` (`petstore migrate status`), read without
 * creating, migrating or writing anything; waits up to `busyTimeoutMs` for another process's lock.
 */
export function readSqliteMigrations(path: string, busyTimeoutMs = 5000): AppliedMigration[] {
  const db = new Database(path, { fileMustExist: true });
  try {
    db.pragma(`busy_timeout = ${Math.trunc(busyTimeoutMs)}`);
    return appliedSqliteMigrations(db);
  } finally {
    db.close();
  }
}
