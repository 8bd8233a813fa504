import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import Database from 'better-sqlite3';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildApp, type AppDeps } from '../src/app.js';
import type { Clock } from '../src/clock.js';
import { loadConfig, type Config } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { freshPostgresStore, postgresSkip, type StoreKind } from './stores.js';
import type { Store } from '../src/store/store.js';

/** A clock the test moves by hand. */
export function manualClock(start = Date.UTC(2026, 10, 22)): Clock & { set(ms: number): void } {
  let now = start;
  return { now: () => now, set: (ms) => void (now = ms) };
}

/** A new temporary folder named `prefix…`, removed with what it holds after the test. */
export function tempFolder(t: TestContext, prefix = 'petstore-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/**
 * A migrated SQLite database at `path` holding `pets` animals (`pet 0`, `pet 1`, …), closed;
 * `more` writes what else it should hold, in the same transaction.
 */
export async function sqliteWithPets(
  path: string,
  pets: number,
  more?: (db: Database.Database) => void,
): Promise<void> {
  const store = openSqliteStore(path);
  await store.migrate();
  await store.close();
  const db = new Database(path);
  try {
    const insert = db.prepare("INSERT INTO pets (name, category_id, status) VALUES (?, 1, 'available')");
    db.transaction(() => {
      for (let i = 0; i < pets; i++) insert.run(`pet ${i}`);
      more?.(db);
    })();
  } finally {
    db.close();
  }
}

/** A fresh, migrated SQLite file in its own temporary folder, removed after the test; `options` as openSqliteStore's. */
export async function tempSqliteStore(
  t: TestContext,
  options?: Parameters<typeof openSqliteStore>[1],
): Promise<{ store: Store; path: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-test-'));
  const path = join(dir, 'petstore.db');
  const store = openSqliteStore(path, options);
  await store.migrate();
  t.after(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return { store, path };
}

/** A fresh SQLite store whose `listPets` rejects, as a lost disk would, while `failing.on` is true. */
export async function storeFailingLists(t: TestContext): Promise<{ store: Store; failing: { on: boolean } }> {
  const { store: real } = await tempSqliteStore(t);
  const failing = { on: false };
  const store: Store = {
    ...real,
    listPets: (query) => (failing.on ? Promise.reject(new Error('disk gone')) : real.listPets(query)),
  };
  return { store, failing };
}

/**
 * The store HTTP tests run on when they name none: SQLite, or a fresh PostgreSQL schema when
 * `PETSTORE_TEST_STORE=postgres` (`npm test` runs the HTTP files both ways).
 */
async function defaultStore(t: TestContext): Promise<Store> {
  if (process.env.PETSTORE_TEST_STORE !== 'postgres') return (await tempSqliteStore(t)).store;
  if (postgresSkip) {
    t.skip(`${postgresSkip}: SKIPPED on PostgreSQL`);
    return (await tempSqliteStore(t)).store;
  }
  return freshPostgresStore(t);
}

export interface TestApp {
  app: FastifyInstance;
  store: Store;
  config: Config;
  clock: ReturnType<typeof manualClock>;
  key: string;
  /** `inject` with the test's API key already in `Authorization`. */
  call(options: InjectOptions): Promise<LightMyRequestResponse>;
}

/** The whole service on a fresh SQLite file, with one API key, closed after the test. */
export async function startApp(
  t: TestContext,
  {
    env = {},
    store: given,
    clock = manualClock(),
    hitFlushMs,
    keyUseFlushMs,
    eventPruneEveryMs,
    deliverWebhooks,
    relay,
  }: {
    env?: Record<string, string>;
    store?: Store;
    clock?: ReturnType<typeof manualClock>;
    /** How long a rate-limit hit waits before it is added to the store's counts. */
    hitFlushMs?: number;
    /** How long a key's use waits before it is written. */
    keyUseFlushMs?: number;
    /** How often expired events are looked for (src/events/retention.ts). */
    eventPruneEveryMs?: number;
    /** The app's own relay delivers webhooks, as `serve`'s does (off by default). */
    deliverWebhooks?: boolean;
    /** The relay's options and grace on close (AppDeps). */
    relay?: AppDeps['relay'];
  } = {},
): Promise<TestApp> {
  const store = given ?? (await defaultStore(t));
  const config = loadConfig({ ...env });
  const app = await buildApp({
    config,
    store,
    clock,
    logger: false,
    hitFlushMs,
    keyUseFlushMs,
    eventPruneEveryMs,
    deliverWebhooks,
    relay,
  });
  t.after(() => app.close());
  const { key } = await issueKey(store, 'test');
  const call = (options: InjectOptions) =>
    app.inject({ ...options, headers: { authorization: `Bearer ${key}`, ...options.headers } });
  return { app, store, config, clock, key, call };
}

/** Posts a valid pet and returns its parsed body. */
export async function addPet(
  { call }: Pick<TestApp, 'call'>,
  pet: Record<string, unknown> = { name: 'Rex', categoryId: 7 },
): Promise<{ id: number; name: string; categoryId: number; status: string }> {
  const response = await call({ method: 'POST', url: '/v1/pets', payload: pet });
  if (response.statusCode !== 201) throw new Error(`createPet answered ${response.statusCode}: ${response.body}`);
  return response.json();
}

const ERROR_BODY = /^\{"code":"([a-z_]+)","message":"((?:[^"\\]|\\.)+)","status":([0-9]{3})\}$/;

/**
 * Asserts an Error response: the status, `application/json`, and a raw body that is exactly
 * `{"code","message","status"}` in that shape; each of `mentions` must appear in `message`.
 */
export function assertError(
  response: LightMyRequestResponse,
  status: number,
  code: string,
  ...mentions: string[]
): string {
  assert.equal(response.statusCode, status, `expected ${status}, got ${response.statusCode}: ${response.body}`);
  assert.match(String(response.headers['content-type']), /^application\/json(;|$)/);
  const match = ERROR_BODY.exec(response.body);
  assert.ok(match, `not an Error body: ${response.body}`);
  assert.equal(match[1], code);
  assert.equal(match[3], String(status));
  const { message } = JSON.parse(response.body) as { message: string };
  for (const mention of mentions) assert.ok(message.includes(mention), `message does not name ${mention}: ${message}`);
  return message;
}

/** Posts `body` as sent, byte for byte, as application/json. */
export function postRaw(
  { call }: Pick<TestApp, 'call'>,
  body: string | Buffer,
  headers: Record<string, string> = {},
): Promise<LightMyRequestResponse> {
  return call({
    method: 'POST',
    url: '/v1/pets',
    headers: { 'content-type': 'application/json', ...headers },
    payload: body,
  });
}

/** SQL that counts, in a table `<column>_writes`, the updates of `column` on api_keys: the writes, seen from the database. */
function countWritesOf(column: string): Record<StoreKind['name'], string> {
  const table = `${column}_writes`;
  return {
    SQLite: `CREATE TABLE ${table} (n INTEGER NOT NULL);
      INSERT INTO ${table} VALUES (0);
      CREATE TRIGGER count_${table} AFTER UPDATE OF ${column} ON api_keys
      BEGIN UPDATE ${table} SET n = n + 1; END;`,
    PostgreSQL: `CREATE TABLE ${table} (n INTEGER NOT NULL);
      INSERT INTO ${table} VALUES (0);
      CREATE FUNCTION count_${table}() RETURNS trigger LANGUAGE plpgsql
        AS $$ BEGIN UPDATE ${table} SET n = n + 1; RETURN NULL; END $$;
      CREATE TRIGGER count_${table} AFTER UPDATE OF ${column} ON api_keys
        FOR EACH ROW EXECUTE FUNCTION count_${table}();`,
  };
}

/**
 * The service on a fresh database of `kind` whose key uses are written `flushMs` after they are
 * noted, with `writes()`: how many times `column` of api_keys was written so far.
 */
export async function appCountingWrites(t: TestContext, kind: StoreKind, column: string, flushMs: number) {
  const database = await kind.createDatabase(t);
  const clock = manualClock();
  const store = database.open({ clock });
  await store.migrate();
  await database.execute(countWritesOf(column)[kind.name]);
  const app = await startApp(t, { store, clock, keyUseFlushMs: flushMs });
  const writes = () => database.scalar(`SELECT n FROM ${column}_writes`);
  return { ...app, database, writes };
}

/**
 * startApp's service on a real socket, so that Node's HTTP parser sees the bytes as sent; on a
 * new SQLite file unless `store` is given.
 */
export async function listeningApp(
  t: TestContext,
  { store, ...options }: Parameters<typeof startApp>[1] = {},
): Promise<TestApp & { port: number }> {
  const app = await startApp(t, { ...options, store: store ?? (await tempSqliteStore(t)).store });
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as { port: number };
  return { ...app, port };
}
