import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../src/store/sqlite.js';
import { StoreUnavailableError } from '../src/store/store.js';
import { assertError, postRaw, startApp } from './helpers.js';

test('answers 503 unavailable when another process holds the SQLite write lock past the timeout', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-busy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'petstore.db');
  const store = openSqliteStore(path, { busyTimeoutMs: 200 });
  t.after(() => store.close());
  await store.migrate();
  const app = await startApp(t, { store });

  const other = new Database(path);
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');
  const start = performance.now();
  assertError(await postRaw(app, '{"name":"Rex","categoryId":7}'), 503, 'unavailable');
  assert.ok(performance.now() - start < 1200);
  await assert.rejects(store.createPet({ name: 'Rex', categoryId: 7n, status: 'available' }), StoreUnavailableError);

  other.exec('ROLLBACK');
  assert.equal((await postRaw(app, '{"name":"Rex","categoryId":7}')).statusCode, 201);
});
