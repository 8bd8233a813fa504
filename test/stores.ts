import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openPostgresStore, type PostgresOptions } from '../src/store/postgres.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Clock } from '../src/clock.js';
import type { Store } from '../src/store/store.js';

/** One empty database, removed with every store opened on it after the test. */
export interface TestDatabase {
  /** A new store on this database, not yet migrated; closed after the test. */
  open(options?: StoreOptions): Store;
  /** Runs SQL straight on the database, around the store (e.g. to delete a row). */
  execute(sql: string): Promise<void>;
  /** The first column of the first row `sql` returns, as a number. */
  scalar(sql: string): Promise<number>;
  /**
   * Blocks writes to `table` (SQLite: to the whole file) from a connection of its own, as a long
   * transaction elsewhere would, until the returned function is called; reads go on.
   */
  blockWrites(table: string): Promise<() => Promise<void>>;
}

export interface StoreKind {
  name: 'SQLite' | 'PostgreSQL';
  /** Why the tests on this store are skipped; false when they run. */
  skip: string | false;
  /** A fresh, empty database of this kind for the test. */
  createDatabase(t: TestContext): Promise<TestDatabase>;
}

export const POSTGRES_URL = process.env.PETSTORE_TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

function shown(url: string) {
  const parsed = new URL(url);
  if (parsed.password) parsed.password = '***';
  return parsed.href;
}

async function reachable(url: string): Promise<string | undefined> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 3000 });
  client.on('error', () => {});
  try {
    await client.connect();
    await client.query('SELECT 1');
    return undefined;
  } catch (error) {
    return (error as Error).message;
  } finally {
    await client.end().catch(() => {});
  }
}

const postgresFailure = await reachable(POSTGRES_URL);
const ci = process.env.CI === 'true';
if (postgresFailure !== undefined) {
  const where = `PostgreSQL not reachable at ${shown(POSTGRES_URL)} (${postgresFailure})`;
  process.stderr.write(
    ci
      ? `\n${where}: CI=true, so the PostgreSQL tests FAIL.\n\n`
      : `\n${where}: SKIPPED the PostgreSQL tests.\nStart one, or set PETSTORE_TEST_DATABASE_URL, to run them.\n\n`,
  );
}

/** Why PostgreSQL tests are skipped, or false when they run (always in CI, where they fail instead). */
export const postgresSkip: string | false =
  postgresFailure !== undefined && !ci ? `PostgreSQL not reachable at ${shown(POSTGRES_URL)}` : false;

const cleanups = new WeakMap<TestContext, (() => unknown)[]>();

/** Runs `step` after the test, the latest registered first: stores close before their database goes. */
function afterTest(t: TestContext, step: () => unknown): void {
  let steps = cleanups.get(t);
  if (!steps) {
    const registered: (() => unknown)[] = (steps = []);
    cleanups.set(t, registered);
    t.after(async () => {
      for (const next of registered.reverse()) await next();
    });
  }
  steps.push(step);
}

async function adminQuery(url: string, sql: string): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 10_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * A new schema in the test database, dropped after the test, and the URL that puts every
 * connection in it (libpq `options=-c search_path=…`).
 */
export async function createPostgresSchema(t: TestContext): Promise<string> {
  if (postgresFailure !== undefined) {
    throw new Error(`PostgreSQL not reachable at ${shown(POSTGRES_URL)} (${postgresFailure}) and CI=true`);
  }
  const schema = `petstore_test_${randomBytes(6).toString('hex')}`;
  await adminQuery(POSTGRES_URL, `CREATE SCHEMA ${schema}`);
  afterTest(t, async () => void (await adminQuery(POSTGRES_URL, `DROP SCHEMA IF EXISTS ${schema} CASCADE`)));
  const url = new URL(POSTGRES_URL);
  url.searchParams.set('options', `-c search_path=${schema}`);
  return url.href;
}

/** What a test may set on a store it opens, besides where its database is. */
export interface StoreOptions {
  /** What PostgreSQL's cached animal counts age by. */
  clock?: Clock;
}

/** `open`, with every store it opens closed after the test. */
function closedAfter(t: TestContext, open: (options?: StoreOptions) => Store): (options?: StoreOptions) => Store {
  return (options) => {
    const store = open(options);
    afterTest(t, () => store.close());
    return store;
  };
}

/** A store on a fresh PostgreSQL schema, migrated, closed and dropped after the test. */
export async function freshPostgresStore(t: TestContext, options: PostgresOptions = {}): Promise<Store> {
  const url = await createPostgresSchema(t);
  const store = closedAfter(t, () => openPostgresStore(url, options))();
  await store.migrate();
  return store;
}

const sqlite: StoreKind = {
  name: 'SQLite',
  skip: false,
  async createDatabase(t) {
    const dir = mkdtempSync(join(tmpdir(), 'petstore-store-'));
    const path = join(dir, 'petstore.db');
    afterTest(t, () => rmSync(dir, { recursive: true, force: true }));
    const open = closedAfter(t, () => openSqliteStore(path));
    return {
      open,
      async execute(sql) {
        const db = new Database(path);
        try {
          db.exec(sql);
        } finally {
          db.close();
        }
      },
      async scalar(sql) {
        const db = new Database(path, { readonly: true });
        try {
          return Number(db.prepare(sql).pluck().get());
        } finally {
          db.close();
        }
      },
      async blockWrites() {
        const db = new Database(path);
        db.exec('BEGIN IMMEDIATE');
        return async () => {
          db.exec('ROLLBACK');
          db.close();
        };
      },
    };
  },
};

const postgres: StoreKind = {
  name: 'PostgreSQL',
  skip: postgresSkip,
  async createDatabase(t) {
    const url = await createPostgresSchema(t);
    const open = closedAfter(t, (options) => openPostgresStore(url, { poolSize: 10, timeoutMs: 5000, ...options }));
    return {
      open,
      execute: async (sql) => void (await adminQuery(url, sql)),
      scalar: async (sql) => Number(Object.values((await adminQuery(url, sql)).rows[0] as object)[0]),
      async blockWrites(table) {
        const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
        client.on('error', () => {});
        await client.connect();
        await client.query('BEGIN');
        await client.query(`LOCK TABLE ${table} IN EXCLUSIVE MODE`);
        const release = async () => {
          await client.query('ROLLBACK');
          await client.end();
        };
        afterTest(t, () => client.end().catch(() => {}));
        return release;
      },
    };
  },
};

/** A fresh database of `kind` and a store on it, migrated; both gone after the test. */
export async function migratedStore(kind: StoreKind, t: TestContext): Promise<[Store, TestDatabase]> {
  const database = await kind.createDatabase(t);
  const store = database.open();
  await store.migrate();
  return [store, database];
}

/** Every store the contract runs on: SQLite always, PostgreSQL when reachable (and always in CI). */
export const storeKinds: StoreKind[] = [sqlite, postgres];
