import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import { groupCommits } from '../src/store/group-commit.js';
import type { PetStatus } from '../src/schemas.js';
import { startApp, tempFolder, tempSqliteStore } from './helpers.js';
import { migratedStore, storeKinds } from './stores.js';

const postgres = storeKinds.find((kind) => kind.name === 'PostgreSQL')!;

/** WAL frames not yet checkpointed: each commit appends at least one. */
function walFrames(db: Database.Database): number {
  const [result] = db.pragma('wal_checkpoint(PASSIVE)') as { log: number }[];
  return result!.log;
}

test('creates made at the same moment share one transaction and each get their own durable id', async (t) => {
  const { store, path } = await tempSqliteStore(t);
  // Not read-only: reading the WAL's frame count takes a (passive) checkpoint.
  const observer = new Database(path);
  t.after(() => observer.close());
  const pets = Array.from({ length: 200 }, (_, i) => ({
    name: `Pet ${i}`,
    categoryId: 2n ** 62n + BigInt(i),
    status: 'pending' as const,
  }));
  const created = await Promise.all(pets.map((pet) => store.createPet(pet)));
  assert.equal(new Set(created.map((pet) => pet.id)).size, 200, 'distinct ids');
  created.forEach((pet, i) => assert.deepEqual({ ...pet, id: undefined }, { ...pets[i], id: undefined }));
  // Another connection reads every one of them, as answered.
  const rows = observer
    .prepare('SELECT id, name, category_id AS categoryId, status FROM pets ORDER BY id')
    .safeIntegers(true)
    .all();
  assert.deepEqual(rows, created);
  // 200 separate commits would have appended 200 frames or more to the WAL.
  const frames = walFrames(observer);
  assert.ok(frames < 40, `${frames} WAL frames for 200 creates`);
});

test('a create that fails in a group fails alone; the others are stored', async (t) => {
  const { store, path } = await tempSqliteStore(t);
  const good = { name: 'Rex', categoryId: 7n, status: 'available' as const };
  // Refused by the table's CHECK constraint, inside the same group as the others.
  const bad = { name: 'Ghost', categoryId: 7n, status: 'lost' as PetStatus };
  const outcomes = await Promise.allSettled([store.createPet(good), store.createPet(bad), store.createPet(good)]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  const db = new Database(path, { readonly: true });
  t.after(() => db.close());
  assert.deepEqual(db.prepare('SELECT name FROM pets ORDER BY id').pluck().all(), ['Rex', 'Rex']);
});

test('a failed commit fails every create in its group and stores none of them', async () => {
  const db = new Database(':memory:');
  db.exec(`PRAGMA foreign_keys = ON;
    CREATE TABLE parents (id INTEGER PRIMARY KEY);
    CREATE TABLE items (parent INTEGER REFERENCES parents (id) DEFERRABLE INITIALLY DEFERRED)`);
  const insert = db.prepare('INSERT INTO items (parent) VALUES (?)');
  // A deferred foreign key is checked at COMMIT: one missing parent makes the COMMIT fail.
  const group = groupCommits(db, (parent: number) => insert.run(parent).changes);
  db.prepare('INSERT INTO parents (id) VALUES (1)').run();
  const outcomes = await Promise.allSettled([group.call(1), group.call(2), group.call(1)]);
  assert.deepEqual(
    outcomes.map((outcome) => outcome.status),
    ['rejected', 'rejected', 'rejected'],
  );
  assert.equal(db.prepare('SELECT count(*) FROM items').pluck().get(), 0);
  assert.equal(await group.call(1), 1, 'the next group commits again');
  db.close();
});

test('one statement each: a failing one fails alone, and one after which SQLite rolled the transaction back fails the group', async () => {
  const db = new Database(':memory:');
  db.exec(`CREATE TABLE items (n INTEGER NOT NULL CHECK (n <> 2));
    CREATE TRIGGER undo BEFORE INSERT ON items WHEN NEW.n = 9 BEGIN SELECT RAISE(ROLLBACK, 'undone'); END`);
  const insert = db.prepare('INSERT INTO items (n) VALUES (?)');
  const group = groupCommits(db, (n: number) => insert.run(n).changes, { oneStatementEach: true });
  const count = () => db.prepare('SELECT count(*) FROM items').pluck().get();
  const alone = await Promise.allSettled([group.call(1), group.call(2), group.call(3)]);
  assert.deepEqual(
    alone.map((outcome) => outcome.status),
    ['fulfilled', 'rejected', 'fulfilled'],
  );
  assert.equal(count(), 2);
  // RAISE(ROLLBACK) ends the whole transaction: nothing of the group may be stored, not even
  // the creates after it (which would otherwise each commit on their own).
  const undone = await Promise.allSettled([group.call(4), group.call(9), group.call(5)]);
  assert.deepEqual(
    undone.map((outcome) => outcome.status),
    ['rejected', 'rejected', 'rejected'],
  );
  assert.equal(count(), 2);
  assert.equal(await group.call(6), 1, 'the next group commits again');
  db.close();
});

test('a group that finds the write lock taken is retried later, with the calls made meanwhile', async (t) => {
  const dir = tempFolder(t, 'petstore-group-');
  const path = join(dir, 'items.db');
  const db = new Database(path, { timeout: 0 });
  t.after(() => db.close());
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE items (n INTEGER NOT NULL)');
  const other = new Database(path);
  t.after(() => other.close());
  const insert = db.prepare('INSERT INTO items (n) VALUES (?)');
  const isBusy = (error: unknown) => (error as { code?: string }).code === 'SQLITE_BUSY';
  const retry = { when: isBusy, timeoutMs: 2000 };
  const group = groupCommits(db, (n: number) => Number(insert.run(n).lastInsertRowid), {
    oneStatementEach: true,
    retry,
  });

  other.exec('BEGIN IMMEDIATE');
  const first = [group.call(1), group.call(2)];
  await new Promise((resolve) => setTimeout(resolve, 30));
  const later = group.call(3);
  await new Promise((resolve) => setTimeout(resolve, 30));
  other.exec('ROLLBACK');
  assert.deepEqual(await Promise.all([...first, later]), [1, 2, 3]);

  // Past the timeout, the calls fail with the lock's error and store nothing.
  const impatient = groupCommits(db, (n: number) => insert.run(n).changes, {
    oneStatementEach: true,
    retry: { when: isBusy, timeoutMs: 50 },
  });
  other.exec('BEGIN IMMEDIATE');
  const started = performance.now();
  await assert.rejects(impatient.call(4), { code: 'SQLITE_BUSY' });
  assert.ok(performance.now() - started >= 50);
  other.exec('ROLLBACK');
  assert.equal(db.prepare('SELECT count(*) FROM items').pluck().get(), 3);
});

test('concurrent POSTs each get a 201 with their own id, and each Location serves what was answered', async (t) => {
  const { call } = await startApp(t);
  const responses = await Promise.all(
    Array.from({ length: 50 }, (_, i) =>
      call({ method: 'POST', url: '/v1/pets', payload: { name: `Dog ${i}`, categoryId: 7 } }),
    ),
  );
  assert.deepEqual(new Set(responses.map((r) => r.statusCode)), new Set([201]));
  const ids = new Set(responses.map((r) => r.json<{ id: number }>().id));
  assert.equal(ids.size, 50);
  for (const response of responses) {
    const fetched = await call({ method: 'GET', url: response.headers.location as string });
    assert.equal(fetched.body, response.body);
  }
});

test(
  'PostgreSQL: creates made at the same moment are written by one statement, each with its own id and fields',
  { skip: postgres.skip },
  async (t) => {
    const [store, database] = await migratedStore(postgres, t);
    // Pets with the same fields too: each still gets an id of its own.
    const pets = Array.from({ length: 200 }, (_, i) => ({
      name: `Pet ${i % 40}`,
      categoryId: 2n ** 62n + BigInt(i % 7),
      status: (['available', 'pending', 'sold'] as const)[i % 3]!,
    }));
    const created = await Promise.all(pets.map((pet) => store.createPet(pet)));
    assert.equal(new Set(created.map((pet) => pet.id)).size, 200, 'distinct ids');
    created.forEach((pet, i) => assert.deepEqual({ ...pet, id: undefined }, { ...pets[i], id: undefined }));
    assert.deepEqual(
      created.map((pet) => pet.id),
      created.map((pet) => pet.id).sort((a, b) => (a < b ? -1 : 1)),
      'ids ascend in the order of the calls',
    );
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), 200);
    // Rows written by one transaction carry its id in xmin: one commit, one WAL flush.
    assert.equal(await database.scalar('SELECT count(DISTINCT xmin::text) FROM pets'), 1);
    // Read back through the store, each as answered.
    for (const pet of created.filter((_, i) => i % 37 === 0)) assert.deepEqual(await store.getPet(pet.id), pet);
  },
);

test(
  'PostgreSQL: a create the database refuses fails alone; the others made with it are stored',
  { skip: postgres.skip },
  async (t) => {
    const [store, database] = await migratedStore(postgres, t);
    const pet = (name: string, status: string) => ({ name, categoryId: 7n, status: status as PetStatus });
    // Refused by the table's CHECK constraint, inside the same statement as the others.
    const outcomes = await Promise.allSettled([
      store.createPet(pet('Rex', 'available')),
      store.createPet(pet('Lost', 'lost')),
      store.createPet(pet('Tom', 'sold')),
    ]);
    assert.deepEqual(
      outcomes.map((outcome) => outcome.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.equal(await database.scalar("SELECT count(*) FROM pets WHERE name IN ('Rex', 'Tom')"), 2);
    assert.equal(await database.scalar("SELECT count(*) FROM pets WHERE name = 'Lost'"), 0);
  },
);

test(
  'PostgreSQL: closing the store first writes the creates waiting for their statement',
  { skip: postgres.skip },
  async (t) => {
    const [store, database] = await migratedStore(postgres, t);
    const waiting = [
      store.createPet({ name: 'Rex', categoryId: 7n, status: 'available' }),
      store.createPet({ name: 'Tom', categoryId: 8n, status: 'sold' }),
    ];
    await store.close();
    const created = await Promise.all(waiting);
    assert.deepEqual(
      created.map((pet) => pet.name),
      ['Rex', 'Tom'],
    );
    assert.equal(await database.scalar('SELECT count(*) FROM pets'), 2);
  },
);
