import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../src/store/sqlite.js';
import { StoreUnavailableError } from '../src/store/store.js';
import { assertError, postRaw, startApp, tempFolder } from './helpers.js';

const ROOT = new URL('..', import.meta.url).pathname;

// Another process: takes SQLite's write lock, says so, and lets it go when told (a line on stdin).
const LOCKER = `
import Database from 'better-sqlite3';
const db = new Database(process.argv[1]);
db.exec('BEGIN IMMEDIATE');
process.stdout.write('locked\\n');
process.stdin.once('data', () => {
  db.exec('ROLLBACK');
  db.close();
  process.stdout.write('released\\n');
  process.exit(0);
});
`;

/** A child process holding the write lock on `path` until `release()`. */
async function holdWriteLock(t: TestContext, path: string) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', LOCKER, path], { cwd: ROOT });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  const heard = (word: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => output.includes(word) && resolve();
      child.stdout.on('data', (chunk) => ((output += chunk), check()));
      child.on('exit', () => reject(new Error(`the locking process exited: ${output}`)));
      check();
    });
  await heard('locked');
  return {
    release: async () => {
      child.stdin.write('go\n');
      await heard('released');
    },
  };
}

async function appOnFile(t: TestContext, busyTimeoutMs: number) {
  const dir = tempFolder(t, 'petstore-busy-');
  const path = join(dir, 'petstore.db');
  const store = openSqliteStore(path, { busyTimeoutMs });
  t.after(() => store.close());
  await store.migrate();
  const app = await startApp(t, { store });
  const base = await app.app.listen({ host: '127.0.0.1', port: 0 });
  const headers = { authorization: `Bearer ${app.key}` };
  const create = (extra: Record<string, string> = {}) =>
    fetch(`${base}/v1/pets`, {
      method: 'POST',
      headers: { ...headers, ...extra, 'content-type': 'application/json' },
      body: '{"name":"Rex","categoryId":7}',
    });
  return { app, base, headers, path, create, store };
}

/** Times `count` health checks one after the other; the slowest, in ms. */
async function slowestHealthCheck(base: string, count: number) {
  // A blocked process would hold one for the whole timeout: 300 ms or 10 s here. The bound
  // leaves room for a busy machine running other tests.
  let slowest = 0;
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    slowest = Math.max(slowest, performance.now() - started);
  }
  return slowest;
}

test('while another process holds the write lock, /healthz answers at once and a create waits, then succeeds', async (t) => {
  const { base, headers, path, create } = await appOnFile(t, 10_000);
  const lock = await holdWriteLock(t, path);
  const answered: string[] = [];
  const creating = create().finally(() => answered.push('create'));
  const idempotent = create({ 'idempotency-key': 'k1' }).finally(() => answered.push('idempotent create'));
  // Reads never wait for a writer (WAL); health checks wait for nothing at all.
  assert.equal((await fetch(`${base}/v1/pets`, { headers })).status, 200);
  const slowest = await slowestHealthCheck(base, 30);
  assert.ok(slowest < 250, `the slowest /healthz took ${slowest.toFixed(1)} ms while a create waited`);
  assert.deepEqual(answered, [], 'no create answered while the lock was held');
  await lock.release();
  const [first, second] = await Promise.all([creating, idempotent]);
  assert.equal(first.status, 201, await first.text());
  assert.equal(second.status, 201, await second.text());
  const db = new Database(path, { readonly: true });
  t.after(() => db.close());
  assert.equal(db.prepare('SELECT count(*) FROM pets').pluck().get(), 2);
});

test('a create waiting for the lock past PETSTORE_DB_TIMEOUT_MS gets 503 unavailable and stores nothing', async (t) => {
  const { app, base, path, create, store } = await appOnFile(t, 300);
  const lock = await holdWriteLock(t, path);
  const started = performance.now();
  const responses = Promise.all([create(), create({ 'idempotency-key': 'k2' })]);
  const slowest = await slowestHealthCheck(base, 10);
  assert.ok(slowest < 250, `the slowest /healthz took ${slowest.toFixed(1)} ms while a create waited`);
  for (const response of await responses) {
    assert.equal(response.status, 503);
    assert.equal(((await response.json()) as { code: string }).code, 'unavailable');
  }
  const waited = performance.now() - started;
  assert.ok(waited >= 280 && waited < 1500, `the creates were answered after ${waited.toFixed(0)} ms`);
  await assert.rejects(store.createPet({ name: 'Rex', categoryId: 7n, status: 'available' }), StoreUnavailableError);
  await lock.release();

  const db = new Database(path, { readonly: true });
  t.after(() => db.close());
  assert.equal(db.prepare('SELECT count(*) FROM pets').pluck().get(), 0);
  assert.equal(db.prepare('SELECT count(*) FROM idempotency_keys').pluck().get(), 0);
  // The 503 was not remembered: the retry with the same key creates.
  assert.equal((await postRaw(app, '{"name":"Rex","categoryId":7}', { 'idempotency-key': 'k2' })).statusCode, 201);
  assertError(await postRaw(app, '{"name":"Rex"}'), 400, 'invalid_request');
});

test('another connection in this process holding the lock past the timeout: 503, then 201 once released', async (t) => {
  const { app, path } = await appOnFile(t, 200);
  const other = new Database(path);
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');
  assertError(await postRaw(app, '{"name":"Rex","categoryId":7}'), 503, 'unavailable');
  other.exec('ROLLBACK');
  assert.equal((await postRaw(app, '{"name":"Rex","categoryId":7}')).statusCode, 201);
});
