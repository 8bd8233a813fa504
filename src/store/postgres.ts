import pg from 'pg';
import { systemClock, type Clock } from '../clock.js';
import { groupCalls } from './batches.js';
import { ADVANCE_EVENT_CLOCK, EVENT_TX } from './postgres-event-clock.js';
import {
  CLIENT_GRACE_MS,
  connectPostgres,
  ignore,
  isUnavailable,
  translate,
  type PostgresConnection,
} from './postgres-connection.js';
import { postgresReads, type PostgresReads } from './postgres-reads.js';
import { openReplicas } from './postgres-replicas.js';
import { routeReads } from './postgres-routing.js';
import { postgresWebhooks } from './postgres-webhooks.js';
import { readMigrations, refuseUnknownMigrations, type AppliedMigration } from './migrations.js';
import type { PetStatus } from '../schemas.js';
import {
  countByStatus,
  EXPIRED_PER_CREATE,
  idempotencyValues,
  KEY_COLUMNS,
  refuseRoll,
  replayFor,
  toKey,
  toPet,
  writeScopes,
  type IdempotencyRow,
  type KeyRow,
  type PetRow,
} from './rows.js';
import {
  PET_COUNTS_MAX_AGE_MS,
  type IdempotencyClaim,
  type KeyRoll,
  type KeyUse,
  type NewKeyRecord,
  type NewPetRecord,
  type OnceOutcome,
  type PetRecord,
  type RollOutcome,
  type Store,
  type StoredResponse,
} from './store.js';

export { withJitOff } from './postgres-connection.js';
export { pageKey } from './postgres-reads.js';

export interface PostgresOptions {
  /** Most connections this store opens at once, to the primary and to each replica. */
  poolSize?: number;
  /** Longest wait for a connection, and for any one statement, before StoreUnavailableError. */
  timeoutMs?: number;
  /** What the age of the animals' counts counts by. */
  clock?: Clock;
  /** Streaming replicas of `url` to read from (DATABASE_READ_URLS; docs/operations.md#read-replicas). */
  readUrls?: readonly string[];
  /** How far behind the primary a replica may be and still be read from (PETSTORE_REPLICA_MAX_LAG_MS). */
  replicaMaxLagMs?: number;
}

// Migrations may build indexes on big tables: longer than a request may wait, still bounded.
const MIGRATION_TIMEOUT_MS = 60_000;

// Advisory locks keyed by two int4: this service's lock class plus the purpose, and the schema,
// so instances on different schemas of one database do not wait for each other.
const LOCK_CLASS = 0x7065_7473; // 'pets'
const MIGRATE_LOCK = 1;
const FIRST_KEY_LOCK = 2;
const takeLock = (lock: number) =>
  `SELECT pg_advisory_xact_lock(${LOCK_CLASS + lock}, hashtext(coalesce(current_schema(), '')))`;

const PET_COLUMNS = 'id, name, category_id, status';

/**
 * The event data of a created animal, `p`, built in SQL: the same text as rows.ts petJson writes
 * and createPet's 201 carries. A name holds no control character (schemas.ts), so to_json
 * escapes exactly what JSON.stringify does: `"` and `\`.
 */
const PET_JSON =
  `'{"id":' || p.id || ',"name":' || to_json(p.name)::text || ',"categoryId":' || p.category_id || ` +
  `',"status":"' || p.status || '"}'`;

/**
 * The outbox (docs/events.md): `pets`, the animals a statement inserted, each with its event in
 * the same statement, so in the same transaction: no extra round trip. ORDER BY p.id: within a
 * batch, events follow the animals' order. $4 is the events' createdAt.
 */
const withEvents = (insertPets: string) =>
  `WITH p AS (${insertPets} RETURNING ${PET_COLUMNS}), ` +
  `e AS (INSERT INTO events (tx, type, created_at, data) ` +
  `SELECT ${EVENT_TX}, 'pet.created', $4::timestamptz, ${PET_JSON} FROM p ORDER BY p.id) ` +
  `SELECT ${PET_COLUMNS} FROM p`;

const statements = {
  insertPet: withEvents('INSERT INTO pets (name, category_id, status) VALUES ($1, $2, $3)'),
  // The creates of one turn of the event loop in one statement: one round trip, one commit.
  insertPets: withEvents(
    'INSERT INTO pets (name, category_id, status) SELECT name, category_id, status ' +
      'FROM unnest($1::text[], $2::bigint[], $3::text[]) WITH ORDINALITY AS u (name, category_id, status, n) ' +
      'ORDER BY n',
  ),
  // Among the $2 oldest only: bounded work whatever the table holds. Instances pruning at once
  // wait for each other's rows, then find them gone.
  pruneEvents:
    'DELETE FROM events AS e USING (SELECT tx, seq FROM events ORDER BY tx, seq LIMIT $2) AS oldest ' +
    'WHERE e.tx = oldest.tx AND e.seq = oldest.seq AND e.created_at < $1',
  countByStatus: 'SELECT status, count(*) AS count FROM pets GROUP BY status',
  insertKey:
    'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) VALUES ($1, $2, $3, $4, $5, $6) ' +
    `RETURNING ${KEY_COLUMNS}`,
  listKeys: `SELECT ${KEY_COLUMNS} FROM api_keys ORDER BY id`,
  revokeKey: 'UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL',
  lockFirstKey: takeLock(FIRST_KEY_LOCK),
  insertFirstKey:
    'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) ' +
    'SELECT $1::text, $2::text, $3::bytea, $4::timestamptz, $5::text, $6::timestamptz ' +
    `WHERE NOT EXISTS (SELECT 1 FROM api_keys) RETURNING ${KEY_COLUMNS}`,
  // FOR UPDATE: a second roll of the key waits for the first to commit, then reads its replaced_by.
  lockKey: `SELECT ${KEY_COLUMNS} FROM api_keys WHERE id = $1 FOR UPDATE`,
  insertSuccessor:
    'INSERT INTO api_keys (name, hint, hash, created_at, scopes, expires_at) ' +
    `SELECT name, $1::text, $2::bytea, $3::timestamptz, scopes, $4::timestamptz FROM api_keys WHERE id = $5 ` +
    `RETURNING ${KEY_COLUMNS}`,
  replaceKey:
    'UPDATE api_keys SET replaced_by = $1, expires_at = least(expires_at, $2) ' +
    `WHERE id = $3 AND replaced_by IS NULL AND revoked_at IS NULL RETURNING ${KEY_COLUMNS}`,
  // One statement per batch; a use never moves last_used_at back (another instance wrote a later one).
  writeKeyUses:
    'UPDATE api_keys AS k SET last_used_at = u.at FROM unnest($1::bigint[], $2::timestamptz[]) AS u (id, at) ' +
    'WHERE k.id = u.id AND (k.last_used_at IS NULL OR k.last_used_at < u.at)',
  writeDeprecatedUses:
    'UPDATE api_keys AS k SET last_deprecated_use_at = u.at FROM unnest($1::bigint[], $2::timestamptz[]) AS u (id, at) ' +
    'WHERE k.id = u.id AND (k.last_deprecated_use_at IS NULL OR k.last_deprecated_use_at < u.at)',
  // The one-bigint advisory lock space, apart from the two-int4 one the locks above use. Held
  // for the transaction: while it is, a retry with the key (on any instance) is in flight.
  lockIdempotency:
    "SELECT pg_try_advisory_xact_lock(hashtextextended(coalesce(current_schema(), '') || ':' || $1 || ':' || $2, 0)) AS locked",
  findIdempotency:
    'SELECT fingerprint, response_status, response_body, response_location, expires_at FROM idempotency_keys ' +
    'WHERE api_key_id = $1 AND key = $2',
  deleteIdempotency: 'DELETE FROM idempotency_keys WHERE api_key_id = $1 AND key = $2',
  // SKIP LOCKED: instances cleaning up at the same moment never wait for each other.
  deleteExpiredIdempotency:
    'DELETE FROM idempotency_keys WHERE (api_key_id, key) IN (SELECT api_key_id, key FROM idempotency_keys ' +
    `WHERE expires_at <= $1 LIMIT ${EXPIRED_PER_CREATE} FOR UPDATE SKIP LOCKED)`,
  insertIdempotency:
    'INSERT INTO idempotency_keys (api_key_id, key, fingerprint, response_status, response_body, ' +
    'response_location, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
  // A batch of hits from one instance: one row per subject, the shared totals returned.
  writeHits:
    'INSERT INTO rate_counters (subject, window_start, hits) SELECT s, $1, h FROM unnest($2::text[], $3::int[]) AS u (s, h) ' +
    'ON CONFLICT (subject, window_start) DO UPDATE SET hits = rate_counters.hits + excluded.hits RETURNING subject, hits',
  deleteOldCounters: 'DELETE FROM rate_counters WHERE window_start < $1',
  ping: 'SELECT 1',
} as const;

type StatementName = keyof typeof statements;

// Statements that change nothing, or only a rate-limit count, and so may be sent twice.
const RETRIED = new Set<StatementName>(['countByStatus', 'listKeys', 'ping']);

// 53100 disk_full, 58000 system_error, 58030 io_error: the server cannot write (or read) its files.
const isDiskError = (error: unknown) =>
  ['53100', '58000', '58030'].includes(String((error as { code?: unknown }).code));

// SQLSTATE class 22 data exception, 23 integrity constraint violation: the row, not the database.
const refusesRow = (error: unknown) => /^2[23]/.test(String((error as { code?: unknown }).code));

/**
 * `pets`, each with the stored record made for it. RETURNING gives the rows in the order they
 * were inserted, which SQL does not promise to be the order given: each row goes back to a pet
 * with the same fields (pets with the same fields are alike, whichever id each gets).
 */
function matchRecords(pets: NewPetRecord[], records: PetRecord[]): PetRecord[] {
  const fieldsOf = (pet: NewPetRecord) => `${pet.status} ${pet.categoryId} ${pet.name}`;
  const made = new Map<string, PetRecord[]>();
  for (const record of records) {
    const alike = made.get(fieldsOf(record));
    if (alike) alike.push(record);
    else made.set(fieldsOf(record), [record]);
  }
  return pets.map((pet) => {
    const record = made.get(fieldsOf(pet))?.shift();
    if (!record) throw new Error('a created row matches no pet of its batch');
    return record;
  });
}

/** Sends the statement `name` of this file on `db` (see PostgresConnection's query). */
function runOn(db: PostgresConnection) {
  return <R extends pg.QueryResultRow>(name: StatementName, values: unknown[] = [], client?: pg.PoolClient) =>
    db.query<R>({ name, text: statements[name], retried: RETRIED.has(name) }, values, client);
}

/** The creates of the animals, each with its event (the outbox), grouped per turn of the event loop. */
function petWrites(db: PostgresConnection, clock: Clock) {
  const query = runOn(db);
  const petValues = (pet: NewPetRecord) => [pet.name, pet.categoryId, pet.status, new Date(clock.now())];
  const insertOne = async (pet: NewPetRecord) => toPet((await query<PetRow>('insertPet', petValues(pet))).rows[0]!);
  // Group commit: the creates of one turn of the event loop share a round trip, a commit and its
  // WAL flush; each 201 still waits for that commit.
  const inserts = groupCalls(async (pets: NewPetRecord[]): Promise<PromiseSettledResult<PetRecord>[]> => {
    if (pets.length === 1) return Promise.allSettled([insertOne(pets[0]!)]);
    try {
      const { rows } = await query<PetRow>('insertPets', [
        pets.map((pet) => pet.name),
        pets.map((pet) => pet.categoryId),
        pets.map((pet) => pet.status),
        new Date(clock.now()),
      ]);
      return matchRecords(pets, rows.map(toPet)).map((value) => ({ status: 'fulfilled', value }));
    } catch (error) {
      // A row the database refuses fails alone, as on SQLite: the others are written one by one.
      if (!refusesRow(error)) throw error;
      return Promise.allSettled(pets.map(insertOne));
    }
  });

  return {
    // Resolves once the statement holding it committed: see inserts.
    createPet: (pet: NewPetRecord) => inserts.call(pet),

    async createPetOnce(
      pet: NewPetRecord,
      claim: IdempotencyClaim,
      respond: (pet: PetRecord) => StoredResponse,
    ): Promise<OnceOutcome> {
      return db.inTransaction(async (client): Promise<OnceOutcome> => {
        const { rows: lock } = await query<{ locked: boolean }>('lockIdempotency', [claim.apiKeyId, claim.key], client);
        if (!lock[0]!.locked) return { kind: 'in_flight' };
        await query('deleteExpiredIdempotency', [claim.now], client);
        // READ COMMITTED: this statement sees what a request that held the lock before us committed.
        const { rows } = await query<IdempotencyRow>('findIdempotency', [claim.apiKeyId, claim.key], client);
        const row = rows[0];
        const replay = replayFor(row, claim);
        if (replay) return replay;
        if (row) await query('deleteIdempotency', [claim.apiKeyId, claim.key], client);
        const { rows: created } = await query<PetRow>('insertPet', petValues(pet), client);
        const response = respond(toPet(created[0]!));
        await query('insertIdempotency', [claim.apiKeyId, ...idempotencyValues(claim, response)], client);
        return { kind: 'created', response };
      });
    },

    // A write that reaches the disk, as a create does, rolled back (it costs an id): see InstrumentedStore.
    async probeWrite() {
      const rolledBack = new Error('rolled back');
      await db
        .inTransaction(async (client) => {
          await query('insertPet', petValues({ name: 'write probe', categoryId: 0n, status: 'available' }), client);
          throw rolledBack;
        })
        .catch((error: unknown) => {
          if (error !== rolledBack) throw error;
        });
    },

    settle: () => inserts.settle(),
  };
}

/** Issuing, listing, rolling and revoking keys, and writing their uses. */
function keyWrites(db: PostgresConnection) {
  const query = runOn(db);
  const writeUses = async (name: 'writeKeyUses' | 'writeDeprecatedUses', uses: KeyUse[]) => {
    await query(name, [uses.map((use) => use.id), uses.map((use) => new Date(use.at))]);
  };
  const keyListeners: (() => void)[] = [];
  const keysChanged = () => keyListeners.forEach((listener) => listener());
  const newKeyValues = (key: NewKeyRecord) => [
    key.name,
    key.hint,
    key.hash,
    key.createdAt,
    writeScopes(key.scopes),
    key.expiresAt ?? null,
  ];

  return {
    async createKey(key: NewKeyRecord) {
      const { rows } = await query<KeyRow>('insertKey', newKeyValues(key));
      return toKey(rows[0]!);
    },

    writeKeyUses: (uses: KeyUse[]) => writeUses('writeKeyUses', uses),
    writeDeprecatedUses: (uses: KeyUse[]) => writeUses('writeDeprecatedUses', uses),

    async listKeys() {
      const { rows } = await query<KeyRow>('listKeys');
      return rows.map(toKey);
    },

    async rollKey({ id, successor, oldExpiresAt, at }: KeyRoll): Promise<RollOutcome> {
      keysChanged();
      return db.inTransaction(async (client): Promise<RollOutcome> => {
        const { rows } = await query<KeyRow>('lockKey', [id], client);
        const refused = refuseRoll(rows[0], at);
        if (refused) return refused;
        const { rows: made } = await query<KeyRow>(
          'insertSuccessor',
          [successor.hint, successor.hash, successor.createdAt, successor.expiresAt ?? null, id],
          client,
        );
        const { rows: old } = await query<KeyRow>('replaceKey', [made[0]!.id, oldExpiresAt, id], client);
        // Rolls back the successor too; the row lock above makes it unreachable.
        if (!old[0]) throw new Error('roll raced');
        return { kind: 'rolled', old: toKey(old[0]), successor: toKey(made[0]!) };
      });
    },

    async revokeKey(id: number, at: Date) {
      keysChanged();
      const { rowCount } = await query('revokeKey', [at, id]);
      return (rowCount ?? 0) > 0;
    },

    onKeysChanged(listener: () => void) {
      keyListeners.push(listener);
    },

    async createFirstKey(key: NewKeyRecord) {
      // READ COMMITTED takes a new snapshot per statement: once the lock is ours, NOT EXISTS sees
      // any key another instance committed while we waited.
      const row = await db.inTransaction(async (client) => {
        await query('lockFirstKey', [], client);
        const { rows } = await query<KeyRow>('insertFirstKey', newKeyValues(key), client);
        return rows[0];
      });
      return row && toKey(row);
    },
  };
}

/** The shared rate-limit counts, and the deletion of windows that have passed. */
function rateCounts(db: PostgresConnection) {
  const query = runOn(db);
  // The newest window this instance has seen; when a newer one begins, older counts are deleted.
  let countersWindow = -Infinity;
  const forgetOldCounters = (windowStart: number) => {
    if (windowStart <= countersWindow) return;
    countersWindow = windowStart;
    // Not awaited: no request waits for the cleanup, and a failed one is retried next window.
    query('deleteOldCounters', [windowStart]).catch(ignore);
  };
  return async (windowStart: number, subjects: string[], hits: number[]) => {
    forgetOldCounters(windowStart);
    const { rows } = await query<{ subject: string; hits: number }>('writeHits', [windowStart, subjects, hits]);
    return new Map(rows.map((row) => [row.subject, row.hits]));
  };
}

/**
 * The animals' counts, cached: a GROUP BY over every animal at most once per
 * PET_COUNTS_MAX_AGE_MS per instance, however often /metrics is scraped. Counting them as they
 * are created instead (a trigger-kept table) costs every create 20-40 % more time
 * (docs/operations-resilience.md); the GROUP BY runs on the server, and the process waits for
 * it without blocking.
 */
function petCounts(db: PostgresConnection, clock: Clock) {
  const query = runOn(db);
  let counted: { at: number; counts: Record<PetStatus, number> } | undefined;
  let counting: Promise<Record<PetStatus, number>> | undefined;
  const countPets = async () => {
    const at = clock.now();
    try {
      const { rows } = await query<{ status: PetStatus; count: bigint }>('countByStatus');
      counted = { at, counts: countByStatus(rows) };
      return counted.counts;
    } finally {
      counting = undefined;
    }
  };
  return async () => {
    if (counted && clock.now() - counted.at < PET_COUNTS_MAX_AGE_MS) return counted.counts;
    counting ??= countPets();
    return counting;
  };
}

/** Applies the migrations not yet applied, on a connection of its own with a longer bound. */
async function migrate(db: PostgresConnection, onApplied?: (name: string, ms: number) => void) {
  const client = new pg.Client({
    ...db.config,
    statement_timeout: MIGRATION_TIMEOUT_MS,
    query_timeout: MIGRATION_TIMEOUT_MS + CLIENT_GRACE_MS,
  });
  client.on('error', ignore);
  try {
    await client.connect();
    const names: string[] = [];
    await client.query('BEGIN');
    try {
      // Instances starting together migrate one at a time; the others then find nothing to do.
      await client.query(takeLock(MIGRATE_LOCK));
      await client.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version INTEGER PRIMARY KEY,
        name TEXT NOT NULL,
        applied_at TIMESTAMPTZ NOT NULL
      )`);
      const { rows } = await client.query<{ version: number; name: string }>(
        'SELECT version, name FROM schema_migrations',
      );
      const known = readMigrations('postgres');
      // Before anything is written (the ROLLBACK below undoes the CREATE TABLE IF NOT EXISTS).
      refuseUnknownMigrations(known, rows);
      const applied = new Set(rows.map((row) => row.version));
      for (const migration of known) {
        if (applied.has(migration.version)) continue;
        const started = performance.now();
        await client.query(migration.sql);
        await client.query('INSERT INTO schema_migrations (version, name, applied_at) VALUES ($1, $2, now())', [
          migration.version,
          migration.name,
        ]);
        names.push(migration.name);
        onApplied?.(migration.name, performance.now() - started);
      }
      for (const statement of ADVANCE_EVENT_CLOCK) await client.query(statement);
      await client.query('COMMIT');
    } catch (error) {
      // On a lost or timed-out connection, closing it is the rollback.
      if (!isUnavailable(error)) await client.query('ROLLBACK').catch(ignore);
      throw error;
    }
    return names;
  } catch (error) {
    throw translate(error);
  } finally {
    await client.end().catch(ignore);
  }
}

/**
 * The Store on the primary alone: every write, and the reads `reads` answers (the primary's own).
 * Writes, key checks, rate counts, idempotency, migrations and the webhook relay always run here.
 */
function primaryStore(db: PostgresConnection, reads: PostgresReads, clock: Clock): Store {
  const query = runOn(db);
  const pets = petWrites(db, clock);
  const keys = keyWrites(db);
  return {
    idsVisibleInOrder: false,
    webhooks: postgresWebhooks(db.inTransaction, db.config, async (text, values, client) => {
      try {
        return await (client ?? db.pool).query(text, values);
      } catch (error) {
        throw translate(error);
      }
    }),
    isDiskError,
    probeWrite: pets.probeWrite,
    addHits: rateCounts(db),
    migrate: (onApplied) => migrate(db, onApplied),
    ping: async () => void (await query('ping')),
    createPet: pets.createPet,
    createPetOnce: pets.createPetOnce,
    getPet: reads.getPet,
    listPets: reads.listPets,
    countPetsByStatus: petCounts(db, clock),
    listEvents: reads.listEvents,
    async pruneEvents(before: Date, limit: number) {
      const { rowCount } = await query('pruneEvents', [before, limit]);
      return rowCount ?? 0;
    },
    findActiveKey: reads.findActiveKey,
    ...keys,
    async close() {
      await Promise.all([pets.settle(), reads.settle()]);
      await db.close();
    },
  };
}

/**
 * A Store on PostgreSQL at `url` (`postgres://user@host:5432/db`), shared by any number of
 * service instances. Connections open lazily: opening never fails, the first query might. With
 * `readUrls`, the animals and the feed are read from those streaming replicas of it while they
 * keep up (postgres-replicas.ts measures them, postgres-routing.ts sends each read).
 *
 * @example
 * const store = openPostgresStore('postgres://petstore@db:5432/petstore', { poolSize: 10 });
 * await store.migrate();
 */
export function openPostgresStore(
  url: string,
  { poolSize = 10, timeoutMs = 5000, clock = systemClock, readUrls = [], replicaMaxLagMs = 1000 }: PostgresOptions = {},
): Store {
  const primary = connectPostgres(url, { poolSize, timeoutMs });
  if (readUrls.length === 0) return primaryStore(primary, postgresReads(primary), clock);
  const replicas = openReplicas(url, readUrls, { poolSize, timeoutMs, maxLagMs: replicaMaxLagMs });
  return routeReads(primaryStore(primary, postgresReads(primary, 'primary'), clock), replicas, timeoutMs);
}

/**
 * The migrations applied to the PostgreSQL database at `url` (`petstore migrate status`), read
 * without migrating or writing anything; none when it has no `schema_migrations` table.
 */
export async function readPostgresMigrations(url: string, timeoutMs = 5000): Promise<AppliedMigration[]> {
  const client = new pg.Client({
    connectionString: url,
    application_name: 'petstore',
    connectionTimeoutMillis: timeoutMs,
    statement_timeout: timeoutMs,
    query_timeout: timeoutMs + CLIENT_GRACE_MS,
  });
  client.on('error', ignore);
  try {
    await client.connect();
    const { rows: found } = await client.query<{ table: string | null }>(
      "SELECT to_regclass('schema_migrations')::text AS table",
    );
    if (found[0]?.table == null) return [];
    const { rows } = await client.query<{ version: number; name: string; applied_at: Date }>(
      'SELECT version, name, applied_at FROM schema_migrations ORDER BY version',
    );
    return rows.map((row) => ({ version: row.version, name: row.name, appliedAt: row.applied_at }));
  } catch (error) {
    throw translate(error);
  } finally {
    await client.end().catch(ignore);
  }
}
