import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/store.js';
import { assertError, postRaw, startApp, tempFolder, type TestApp } from './helpers.js';
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
  const dir = tempFolder(t, 'petstore-full-');
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

  // Room again: most animals and their events deleted by hand, their pages free for new rows.
  db.prepare('DELETE FROM pets WHERE id <= ?').run(stored - 5);
  db.prepare('DELETE FROM events WHERE seq <= (SELECT max(seq) FROM events) - 5').run();
  await assertReady(app);
  assert.equal((await postRaw(app, PET, { 'idempotency-key': 'full-1' })).statusCode, 201);
  await assertReady(app);
});

/** Runs `command`; false when it fails (not root, no mount in this container). */
function tryRun(command: string, args: string[]): boolean {
  return spawnSync(command, args, { stdio: 'ignore' }).status === 0;
}

// A real full disk: the animals' table and indexes on a 1 MB file system. It takes root (to
// mount it) and a server on this machine (to reach the folder), so elsewhere it is skipped.
test(
  'PostgreSQL: a full disk under the animals table answers 503, /readyz not ready until it has room',
  { skip: postgresSkip },
  async (t) => {
    const database = await storeKinds.find((kind) => kind.name === 'PostgreSQL')!.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const app = await startApp(t, { store });
    const name = `petstore_full_${randomBytes(4).toString('hex')}`;
    const dir = join(tmpdir(), name);
    mkdirSync(dir);
    // One step after another, the latest added first (after hooks run in the order they were
    // added): the table out of the tablespace, the tablespace, the file system, its folder.
    const cleanups: (() => unknown)[] = [];
    t.after(async () => {
      for (const step of cleanups.reverse()) await step();
    });
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    if (process.getuid?.() !== 0 || !tryRun('mount', ['-t', 'tmpfs', '-o', 'size=1m,mode=0700', 'tmpfs', dir])) {
      t.skip('needs root and mount: a 1 MB file system for the tablespace');
      return;
    }
    cleanups.push(() => tryRun('umount', [dir]));
    if (!tryRun('chown', ['postgres:postgres', dir])) {
      t.skip('no postgres user on this machine: the server is elsewhere');
      return;
    }
    try {
      await database.execute(`CREATE TABLESPACE ${name} LOCATION '${dir}'`);
    } catch (error) {
      t.skip(`the server cannot use ${dir}: ${(error as Error).message}`);
      return;
    }
    cleanups.push(() => database.execute(`DROP TABLESPACE IF EXISTS ${name}`));
    cleanups.push(() => database.execute('DROP TABLE IF EXISTS pets CASCADE'));
    await database.execute(
      `ALTER TABLE pets SET TABLESPACE ${name}; ALTER INDEX pets_pkey SET TABLESPACE ${name}; ` +
        `ALTER INDEX pets_status_id SET TABLESPACE ${name}`,
    );

    // One statement fills the file system, fails, and leaves the files as large as they got.
    await assert.rejects(
      database.execute(
        "INSERT INTO pets (name, category_id, status) SELECT 'Rex', i, 'sold' FROM generate_series(1, 1000000) AS i",
      ),
      /No space left on device/,
    );
    const stored = await database.scalar('SELECT count(*) FROM pets');
    assertError(await postRaw(app, PET), 503, 'unavailable');
    assertError(await postRaw(app, PET, { 'idempotency-key': 'full-1' }), 503, 'unavailable');
    await assertNotReady(app);
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), stored);

    assert.ok(tryRun('mount', ['-o', 'remount,size=16m', dir]), 'the file system grows');
    await assertReady(app);
    assert.equal((await postRaw(app, PET, { 'idempotency-key': 'full-1' })).statusCode, 201);
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), stored + 1);
  },
);

// Where the test above cannot run: a trigger raises the error the server raises when it cannot
// extend a file, SQLSTATE 53100 disk_full, with the server's message; the service meets it over
// the wire like the real one.
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
