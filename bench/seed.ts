import { spawnSync } from 'node:child_process';
import { copyFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import pg from 'pg';
import { runPetstore } from './processes.js';

/** The PostgreSQL server the benchmarks use: each makes a schema of its own there. */
export const POSTGRES_URL = process.env.PETSTORE_BENCH_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

export interface Seeded {
  /** The environment that points `petstore` at the database. */
  env: Record<string, string>;
  key: string;
  /** Ids 1..pets are stored. */
  pets: number;
  /**
   * Does now the background work a database would otherwise do during a later sample (PostgreSQL:
   * autovacuum, the checkpoint that many inserts call for, and the kernel writing it out), so it
   * does not take CPU time from the next server measured.
   */
  settle?: () => Promise<void>;
}

// Statuses cycle available, pending, sold: a status filter matches every third animal.
const STATUS_OF_I = "CASE i % 3 WHEN 0 THEN 'sold' WHEN 1 THEN 'available' ELSE 'pending' END";

function issueKey(env: Record<string, string>): string {
  const { key } = JSON.parse(runPetstore(['keys', 'create', '--name', 'bench', '--json'], env)) as { key: string };
  return key;
}

/** Migrates a new SQLite file with the service's own command, then fills it with `pets` animals in one statement. */
export function seedSqlite(path: string, pets: number): Seeded {
  const env = { PETSTORE_DB: path };
  runPetstore(['migrate'], env);
  const db = new Database(path);
  db.exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${pets})
    INSERT INTO pets (name, category_id, status) SELECT 'Pet ' || i, i % 50, ${STATUS_OF_I} FROM n`);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return { env, key: issueKey(env), pets };
}

/**
 * The store `seeded` for one more server process: on SQLite a copy of the file at `copyPath`,
 * since one process serves a SQLite file (docs/operations.md#one-process-per-sqlite-file): take
 * it before any server opens the seeded file, so that it holds the same pets and key. PostgreSQL,
 * which any number of instances share, as it is.
 */
export function storeFor(seeded: Seeded, copyPath: string): Seeded {
  const path = seeded.env.PETSTORE_DB;
  if (path === undefined) return seeded;
  copyFileSync(path, copyPath);
  return { ...seeded, env: { ...seeded.env, PETSTORE_DB: copyPath } };
}

async function adminQuery(url: string, sql: string): Promise<void> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  client.on('error', () => {});
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Whether PostgreSQL answers at `url`. */
export async function reachable(url: string): Promise<boolean> {
  try {
    await adminQuery(url, 'SELECT 1');
    return true;
  } catch {
    return false;
  }
}

/** A new schema at `url` holding `pets` animals; `drop` removes it. */
export async function seedPostgres(
  url: string,
  schema: string,
  pets: number,
): Promise<Seeded & { drop: () => Promise<void> }> {
  await adminQuery(url, `CREATE SCHEMA ${schema}`);
  const inSchema = new URL(url);
  inSchema.searchParams.set('options', `-c search_path=${schema}`);
  const env = { DATABASE_URL: inSchema.href };
  runPetstore(['migrate'], env);
  await adminQuery(
    inSchema.href,
    `INSERT INTO pets (name, category_id, status) SELECT 'Pet ' || i, i % 50, ${STATUS_OF_I} FROM generate_series(1, ${pets}) AS i;
     ANALYZE pets`,
  );
  return {
    env,
    key: issueKey(env),
    pets,
    settle: async () => {
      await adminQuery(inSchema.href, 'VACUUM ANALYZE pets');
      await adminQuery(url, 'CHECKPOINT');
      // The checkpoint's writes leave the kernel's writeback to do: done now, not in a later sample.
      spawnSync('sync');
    },
    drop: () => adminQuery(url, `DROP SCHEMA IF EXISTS ${schema} CASCADE`),
  };
}

/**
 * Writes `count` `pet.created` events stamped now straight into the store `seeded`, in one
 * statement, as a receiver's long outage leaves them waiting; the service may be running.
 */
export async function writeEvents(seeded: Seeded, count: number): Promise<void> {
  if (seeded.env.PETSTORE_DB !== undefined) {
    const db = new Database(seeded.env.PETSTORE_DB);
    try {
      db.pragma('busy_timeout = 10000');
      db.exec(eventRowsSql('SQLite', count));
    } finally {
      db.close();
    }
    return;
  }
  await adminQuery(seeded.env.DATABASE_URL!, eventRowsSql('PostgreSQL', count));
}

/**
 * The statement that writes `count` pet.created events (ids 1 to count) into a migrated store
 * of that kind, created now or at `createdAt` (ISO 8601, UTC), each with its place in the feed's
 * order taken as the service's own writes take it (migrations/postgres/006_events.sql on PostgreSQL).
 */
export function eventRowsSql(store: 'SQLite' | 'PostgreSQL', count: number, createdAt?: string): string {
  const data = `'{"id":' || i || ',"name":"Pet ' || i || '","categoryId":7,"status":"available"}'`;
  const at = createdAt === undefined ? undefined : `'${new Date(createdAt).toISOString()}'`;
  return store === 'SQLite'
    ? `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${count})
        INSERT INTO events (type, created_at, data) SELECT 'pet.created', ${at ?? "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')"}, ${data} FROM n`
    : `INSERT INTO events (tx, type, created_at, data)
        SELECT pg_current_xact_id()::text::bigint + (SELECT tx_offset FROM event_clock), 'pet.created', ${at ?? 'now()'}, ${data}
        FROM generate_series(1, ${count}) AS i`;
}
