import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { openPostgresStore, type PostgresOptions } from '../src/store/postgres.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Clock } from '../src/clock.js';
import type { Store } from '../src/store/store.js';

/**
 * A database for one test. After the test, every store opened on it is closed, then the
 * database is removed (or, migrated and left unchanged in shape, emptied for the next test).
 */
export interface TestDatabase {
  /** The SQLite file; undefined on PostgreSQL. */
  path?: string;
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
  /** A fresh, empty database of this kind for the test, not migrated. */
  createDatabase(t: TestContext): Promise<TestDatabase>;
  /**
   * A migrated database of this kind with no rows, for a test that needs nothing else of it
   * (PostgreSQL: a schema another test of the file may have used, emptied since).
   */
  migratedDatabase(t: TestContext): Promise<TestDatabase>;
}

export const POSTGRES_URL = process.env.PETSTORE_TEST_DATABASE_URL || 'postgres://postgres@127.0.0.1:5432/test';

/**
 * Streaming replicas of POSTGRES_URL's server (PETSTORE_TEST_DATABASE_READ_URLS, comma-separated):
 * when set, every PostgreSQL store the tests open reads from them too (DATABASE_READ_URLS), in the
 * test's schema. test/replica-suite.test.ts sets them to a pair of its own.
 */
const POSTGRES_READ_URLS = (process.env.PETSTORE_TEST_DATABASE_READ_URLS ?? '')
  .split(',')
  .map((url) => url.trim())
  .filter((url) => url !== '');

/** The options to open a store at `url` with: its replicas, in the same schema (the URL's libpq options). */
function withReplicas(url: string, options: PostgresOptions = {}): PostgresOptions {
  if (POSTGRES_READ_URLS.length === 0) return options;
  const schemaOptions = new URL(url).searchParams.get('options');
  const readUrls = POSTGRES_READ_URLS.map((readUrl) => {
    const parsed = new URL(readUrl);
    if (schemaOptions) parsed.searchParams.set('options', schemaOptions);
    return parsed.href;
  });
  return { readUrls, ...options };
}

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
  // A bound on a hang, not on a busy machine: seeding a million rows may take many seconds.
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 60_000 });
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
  /** The store's clock: what events are stamped with, and what PostgreSQL's cached animal counts age by. */
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

/** One connection of this process for the schemas below, opened when first needed. */
let admin: Promise<pg.Client> | undefined;

async function adminPool(sql: string): Promise<pg.QueryResult | pg.QueryResult[]> {
  admin ??= (async () => {
    const client = new pg.Client({
      connectionString: POSTGRES_URL,
      connectionTimeoutMillis: 3000,
      query_timeout: 60_000,
    });
    client.on('error', () => void (admin = undefined));
    await client.connect();
    return client;
  })();
  return (await admin).query(sql) as Promise<pg.QueryResult | pg.QueryResult[]>;
}

interface MigratedSchema {
  schema: string;
  url: string;
  /** What migrating it left: shapeSql's answer. */
  shape: string;
  /** Deletes every row, children before parents, restarts every sequence, and writes again the rows migrating wrote. */
  emptying: string;
}

/**
 * Migrated schemas this process made, free for the next test. Creating and migrating a schema
 * costs a dozen DDL statements; a test that only needs a migrated, empty database gets one of
 * these instead, emptied after the test that held it (the rows deleted and the sequences
 * restarted, as RESTART IDENTITY would). All are dropped once the file's tests are done.
 */
const migratedSchemas: MigratedSchema[] = [];
const madeHere = new Set<string>();

/**
 * The schema's shape: every table, column, default, constraint, index, trigger and function,
 * and the migrations it records. A test that changed any of it (a trigger added, a migration
 * row written) leaves a schema that is dropped, not handed to the next test.
 */
function shapeSql(schema: string): string {
  const here = `'${schema}'::regnamespace`;
  return `SELECT md5(string_agg(item, E'\n' ORDER BY item)) AS shape FROM (
      SELECT format('class %s %s %s %s', relname, relkind, relpersistence, reloptions)
        FROM pg_class WHERE relnamespace = ${here}
      UNION ALL SELECT format('column %s.%s %s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
          a.attnotnull, pg_get_expr(d.adbin, d.adrelid))
        FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE c.relnamespace = ${here} AND a.attnum > 0 AND NOT a.attisdropped
      UNION ALL SELECT format('constraint %s %s', conname, pg_get_constraintdef(oid))
        FROM pg_constraint WHERE connamespace = ${here}
      UNION ALL SELECT format('index %s', pg_get_indexdef(i.indexrelid))
        FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = ${here}
      UNION ALL SELECT format('trigger %s', pg_get_triggerdef(t.oid))
        FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = ${here}
      UNION ALL SELECT format('function %s', oid::regprocedure) FROM pg_proc WHERE pronamespace = ${here}
      UNION ALL SELECT format('type %s', typname) FROM pg_type WHERE typnamespace = ${here}
      UNION ALL SELECT format('migration %s %s', version, name) FROM ${schema}.schema_migrations
    ) AS shape (item)`;
}

/** The statements that empty `schema` as a fresh migration leaves it, from its catalogue. */
async function emptyingOf(schema: string): Promise<string> {
  const tables = (await adminPool(
    `SELECT c.relname AS name, array_remove(array_agg(DISTINCT p.relname), NULL) AS parents
      FROM pg_class c
      LEFT JOIN pg_constraint f ON f.conrelid = c.oid AND f.contype = 'f' AND f.confrelid <> c.oid
      LEFT JOIN pg_class p ON p.oid = f.confrelid
      WHERE c.relnamespace = '${schema}'::regnamespace AND c.relkind = 'r' AND c.relname <> 'schema_migrations'
      GROUP BY c.relname`,
  )) as pg.QueryResult<{ name: string; parents: string[] }>;
  const sequences = (await adminPool(
    `SELECT sequencename AS name FROM pg_sequences WHERE schemaname = '${schema}'`,
  )) as pg.QueryResult<{ name: string }>;
  // Children first: a table is emptied once every table that references it is.
  const order: string[] = [];
  const left = new Map(tables.rows.map((row) => [row.name, row.parents]));
  while (left.size > 0) {
    const child = [...left.keys()].find((name) => ![...left.values()].some((parents) => parents.includes(name)));
    if (child === undefined) throw new Error(`tables of ${schema} reference each other in a cycle`);
    order.push(child);
    left.delete(child);
  }
  // Rows the migrations wrote (event_clock's one row) are written again, parents first.
  const seeded = (await adminPool(
    order
      .map((name) => `SELECT '${name}' AS name, (SELECT json_agg(t) FROM ${schema}.${name} t) AS rows`)
      .join(' UNION ALL '),
  )) as pg.QueryResult<{ name: string; rows: unknown[] | null }>;
  const refills = seeded.rows
    .filter(({ rows }) => rows !== null)
    .sort((a, b) => order.indexOf(b.name) - order.indexOf(a.name))
    .map(({ name, rows }) => {
      const json = JSON.stringify(rows).replaceAll("'", "''");
      const table = `${schema}.${name}`;
      return `INSERT INTO ${table} OVERRIDING SYSTEM VALUE SELECT * FROM json_populate_recordset(NULL::${table}, '${json}');`;
    });
  return [
    ...order.map((name) => `DELETE FROM ${schema}.${name};`),
    ...sequences.rows.map(({ name }) => `ALTER SEQUENCE ${schema}.${name} RESTART;`),
    ...refills,
  ].join(' ');
}

const dropSchema = (schema: string) => adminPool(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);

/**
 * The URL of a migrated, empty schema for the test: one a test of this file used before and
 * left as migrated (emptied after it), else a new one, migrated here. After the test it is
 * emptied and kept for the next, or dropped when the test changed its shape.
 */
async function migratedPostgresSchema(t: TestContext): Promise<string> {
  let held = migratedSchemas.pop();
  if (!held) {
    if (postgresFailure !== undefined) {
      throw new Error(`PostgreSQL not reachable at ${shown(POSTGRES_URL)} (${postgresFailure}) and CI=true`);
    }
    const schema = `petstore_test_${randomBytes(6).toString('hex')}`;
    await adminPool(`CREATE SCHEMA ${schema}`);
    madeHere.add(schema);
    const url = new URL(POSTGRES_URL);
    url.searchParams.set('options', `-c search_path=${schema}`);
    const store = openPostgresStore(url.href, { poolSize: 1 });
    try {
      await store.migrate();
    } finally {
      await store.close();
    }
    const { rows } = (await adminPool(shapeSql(schema))) as pg.QueryResult<{ shape: string }>;
    held = { schema, url: url.href, shape: rows[0]!.shape, emptying: await emptyingOf(schema) };
  }
  const taken = held;
  afterTest(t, async () => {
    try {
      // One round trip: emptied in a transaction, then the shape read.
      const results = (await adminPool(
        `BEGIN; SET LOCAL lock_timeout = '5s'; ${taken.emptying} COMMIT; ${shapeSql(taken.schema)}`,
      )) as pg.QueryResult<{ shape: string }>[];
      if (results.at(-1)!.rows[0]!.shape === taken.shape) {
        migratedSchemas.push(taken);
        return;
      }
    } catch {
      await adminPool('ROLLBACK').catch(() => {});
    }
    // Whatever the test changed, or left that cannot be emptied, goes with the schema.
    madeHere.delete(taken.schema);
    await dropSchema(taken.schema);
  });
  return taken.url;
}

// Registered where this module is first loaded: at the top of a test file, or in the suite
// that imports the files (postgres-suite.test.ts); either way it runs after the file's tests.
after(async () => {
  for (const schema of madeHere) await dropSchema(schema).catch(() => {});
  madeHere.clear();
  migratedSchemas.length = 0;
  const client = admin;
  admin = undefined;
  await (await client?.catch(() => undefined))?.end();
});

/** A store on a migrated, empty PostgreSQL schema, closed after the test (migratedPostgresSchema). */
export async function freshPostgresStore(t: TestContext, options: PostgresOptions = {}): Promise<Store> {
  const url = await migratedPostgresSchema(t);
  const store = closedAfter(t, () => openPostgresStore(url, withReplicas(url, options)))();
  await store.migrate();
  return store;
}

const sqlite: StoreKind = {
  name: 'SQLite',
  // With read replicas (test/replica-suite.test.ts), only what PostgreSQL runs differs.
  skip: POSTGRES_READ_URLS.length > 0 ? 'SQLite has no read replicas: its runs elsewhere are the same' : false,
  async createDatabase(t) {
    const dir = mkdtempSync(join(tmpdir(), 'petstore-store-'));
    const path = join(dir, 'petstore.db');
    afterTest(t, () => rmSync(dir, { recursive: true, force: true }));
    const open = closedAfter(t, (options) => openSqliteStore(path, options));
    return {
      path,
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
  async migratedDatabase(t) {
    // A new SQLite file costs less than emptying one.
    const database = await this.createDatabase(t);
    const store = openSqliteStore(database.path!);
    try {
      await store.migrate();
    } finally {
      await store.close();
    }
    return database;
  },
};

const postgres: StoreKind = {
  name: 'PostgreSQL',
  skip: postgresSkip,
  async createDatabase(t) {
    return postgresDatabase(t, await createPostgresSchema(t));
  },
  async migratedDatabase(t) {
    return postgresDatabase(t, await migratedPostgresSchema(t));
  },
};

function postgresDatabase(t: TestContext, url: string): TestDatabase {
  const open = closedAfter(t, (options) =>
    openPostgresStore(url, withReplicas(url, { poolSize: 10, timeoutMs: 5000, ...options })),
  );
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
}

/** A migrated, empty database of `kind` and a store on it; the store closed after the test. */
export async function migratedStore(kind: StoreKind, t: TestContext): Promise<[Store, TestDatabase]> {
  const database = await kind.migratedDatabase(t);
  const store = database.open();
  await store.migrate();
  return [store, database];
}

/** Every store the contract runs on: SQLite always, PostgreSQL when reachable (and always in CI). */
export const storeKinds: StoreKind[] = [sqlite, postgres];

/**
 * A test on PostgreSQL alone, skipped as the other PostgreSQL tests are, given two stores on one
 * fresh migrated database, as two instances of the service have.
 */
export function testTwoInstances(name: string, fn: (t: TestContext, stores: [Store, Store]) => Promise<void>): void {
  test(`PostgreSQL: ${name}`, { skip: postgres.skip }, async (t) => {
    const database = await postgres.createDatabase(t);
    const stores: [Store, Store] = [database.open(), database.open()];
    await stores[0].migrate();
    await fn(t, stores);
  });
}
