import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/store.js';
import { assertError, postRaw, startApp, type TestApp } from './helpers.js';
import { postgresSkip, storeKinds } from './stores.js';

const PET = '{"name":"Rex","categoryId":7}';

/** Creates animals until one is refused; every answer before it is a 201, the refusal a 503. */
async function fillUntilRefused(app: TestApp) {
  for (let i = 0; i < 20_000; i++) {
    const response = await postRaw(app, PET);
    if (response.statusCode === 201) continue;
    assertError(response, 503, 'unavailable');
    return;
  }
  assert.fail('20,000 creates and the file never stopped growing');
}

async function assertNotReady(app: TestApp) {
  assertError(await app.app.inject({ method: 'GET', url: '/readyz' }), 503, 'unavailable');
  assert.equal((await app.app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
}

async function assertReady(app: TestApp) {
  const response = await app.app.inject({ method: 'GET', url: '/readyz' });
  assert.equal(response.statusCode, 200, response.body);
  assert.deepEqual(response.json(), { status: 'ready' });
}

test('SQLite: a file that cannot grow (SQLITE_FULL) answers 503 and /readyz is not ready until a write succeeds', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-full-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'petstore.db');
  // The tables and indexes take about a dozen pages; a few more hold some hundreds of animals.
  const store = openSqliteStore(path, { maxPageCount: 24 });
  t.after(() => store.close());
  await store.migrate();
  const app = await startApp(t, { store });
  await assertReady(app);

  await fillUntilRefused(app);
  const db = new Database(path);
  t.after(() => db.close());
  const count = () => Number(db.prepare('SELECT count(*) FROM pets').pluck().get());
  const stored = count();
  assertError(await postRaw(app, PET), 503, 'unavailable');
  assertError(await postRaw(app, PET, { 'idempotency-key': 'full-1' }), 503, 'unavailable');
  assert.equal(count(), stored, 'nothing stored on a 503');
  assert.equal(db.prepare('SELECT count(*) FROM idempotency_keys').pluck().get(), 0);
  await assertNotReady(app);
  await assertNotReady(app);

  // Room again: most animals deleted by hand, their pages free for new rows.
  db.prepare('DELETE FROM pets WHERE id <= ?').run(stored - 5);
  await assertReady(app);
  assert.equal((await postRaw(app, PET, { 'idempotency-key': 'full-1' })).statusCode, 201);
  await assertReady(app);
});

// PostgreSQL runs in its own process and user: filling its disk from a test needs a small file
// system of its own mounted as a tablespace (root). Instead a trigger raises the error the
// server raises when it cannot extend a file, SQLSTATE 53100 disk_full, with the server's
// message; the service meets it over the wire like the real one.
const FULL_DISK = `
CREATE FUNCTION disk_is_full() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'could not extend file "base/16384/16385": No space left on device'
    USING ERRCODE = 'disk_full', HINT = 'Check free disk space.';
END
$$;
CREATE TRIGGER disk_is_full BEFORE INSERT ON pets FOR EACH ROW EXECUTE FUNCTION disk_is_full();
`;

test(
  'PostgreSQL: disk_full (53100) answers 503 and /readyz is not ready until a write succeeds',
  { skip: postgresSkip },
  async (t) => {
    const database = await storeKinds.find((kind) => kind.name === 'PostgreSQL')!.createDatabase(t);
    const store: Store = database.open();
    await store.migrate();
    const app = await startApp(t, { store });
    assert.equal((await postRaw(app, PET)).statusCode, 201);
    await assertReady(app);

    await database.execute(FULL_DISK);
    assertError(await postRaw(app, PET), 503, 'unavailable');
    assertError(await postRaw(app, PET, { 'idempotency-key': 'full-1' }), 503, 'unavailable');
    await assertNotReady(app);
    await assertNotReady(app);
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), 1);
    assert.equal(await database.scalar('SELECT count(*) FROM idempotency_keys'), 0);

    await database.execute('DROP TRIGGER disk_is_full ON pets');
    await assertReady(app);
    assert.equal((await postRaw(app, PET, { 'idempotency-key': 'full-1' })).statusCode, 201);
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), 2);
  },
);
