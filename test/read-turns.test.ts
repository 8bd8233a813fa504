import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import { setImmediate as nextTurn } from 'node:timers/promises';
import Database from 'better-sqlite3';
import { keyMemory } from '../src/keys/memory.js';
import type { Store } from '../src/store/store.js';
import { tempSqliteStore } from './helpers.js';

// The SQLite store's reads of one turn of the event loop share one read transaction (readTurns).
// These tests look at it from another connection to the same file, as another process would.

async function storeAndObserver(t: TestContext) {
  const { store, path } = await tempSqliteStore(t);
  const observer = new Database(path);
  observer.defaultSafeIntegers(true);
  t.after(() => observer.close());
  return {
    store,
    observer,
    count: (table: string) => observer.prepare<[], bigint>(`SELECT count(*) FROM ${table}`).pluck().get()!,
  };
}

const pet = { name: 'Rex', categoryId: 1n, status: 'available' as const };
const newKey = (name: string) => ({ name, hint: 'psk_abcd', hash: randomBytes(32), createdAt: new Date() });

test('the reads of one turn see one snapshot; the next turn sees what was committed meanwhile', async (t) => {
  const { store, observer } = await storeAndObserver(t);
  const { id } = await store.createPet(pet);
  await nextTurn();
  assert.equal((await store.getPet(id))?.name, 'Rex');
  observer.prepare('UPDATE pets SET name = ? WHERE id = ?').run('Max', id);
  // Same turn: the snapshot the first read took.
  assert.equal((await store.getPet(id))?.name, 'Rex');
  assert.equal((await store.listPets({ limit: 5 }))[0]?.name, 'Rex');
  await nextTurn();
  assert.equal((await store.getPet(id))?.name, 'Max');
});

test('the read transaction ends with its turn: nothing holds the WAL after it', async (t) => {
  const { store, observer } = await storeAndObserver(t);
  await store.createPet(pet);
  await nextTurn();
  await store.listPets({ limit: 5 });
  // A reader holding its snapshot keeps a TRUNCATE checkpoint from finishing (busy = 1).
  const checkpoint = () => (observer.pragma('wal_checkpoint(TRUNCATE)') as { busy: bigint }[])[0]!.busy;
  observer.pragma('busy_timeout = 0');
  assert.equal(checkpoint(), 1n, 'held during the turn');
  await nextTurn();
  assert.equal(checkpoint(), 0n, 'released after it');
});

// Each write, made in a turn while the turn's read transaction is open: committed when its
// promise settles, not when the turn ends (inside that transaction its statements would wait for
// the turn's COMMIT).
const writes: [string, (store: Store) => Promise<unknown>, string][] = [
  [
    'createPetOnce',
    async (store) => {
      const { id } = await store.createKey(newKey('owner'));
      // createKey ended the turn's read transaction: open it again.
      void store.getPet(1n);
      const now = Date.now();
      const claim = { apiKeyId: id, key: 'k', fingerprint: Buffer.alloc(32), now, expiresAt: now + 60_000 };
      return store.createPetOnce(pet, claim, (created) => ({
        status: 201,
        body: `{"id":${created.id}}`,
        location: `/v1/pets/${created.id}`,
      }));
    },
    'idempotency_keys',
  ],
  ['createKey', (store) => store.createKey(newKey('second')), 'api_keys'],
  ['createFirstKey', (store) => store.createFirstKey(newKey('first')), 'api_keys'],
];

for (const [name, write, table] of writes) {
  test(`${name} after a read in the same turn is committed when it resolves`, async (t) => {
    const { store, count } = await storeAndObserver(t);
    const before = count(table);
    await nextTurn();
    void store.listPets({ limit: 5 });
    await write(store);
    assert.equal(count(table), before + 1n);
  });
}

test('a group of creates whose turn read is committed when they resolve', async (t) => {
  const { store, count } = await storeAndObserver(t);
  await nextTurn();
  // The group is queued first, so it is written before the turn's read transaction would end.
  const done = Promise.all([store.createPet(pet), store.createPet(pet)]);
  void store.listPets({ limit: 5 });
  await done;
  assert.equal(count('pets'), 2n);
});

test('revokeKey and rollKey after a read in the same turn are committed when they resolve', async (t) => {
  const { store, observer } = await storeAndObserver(t);
  const first = await store.createKey(newKey('first'));
  const second = await store.createKey(newKey('second'));
  await nextTurn();
  await store.getPet(1n);
  assert.equal(await store.revokeKey(first.id, new Date()), true);
  assert.notEqual(observer.prepare('SELECT revoked_at FROM api_keys WHERE id = ?').pluck().get(first.id), null);
  await store.listKeys();
  const roll = await store.rollKey({
    id: second.id,
    successor: { hint: 'psk_efgh', hash: randomBytes(32), createdAt: new Date() },
    oldExpiresAt: new Date(Date.now() + 60_000),
    at: new Date(),
  });
  assert.equal(roll.kind, 'rolled');
  assert.notEqual(observer.prepare('SELECT replaced_by FROM api_keys WHERE id = ?').pluck().get(second.id), null);
});

test("a batch of key uses written while the turn's read transaction is open is committed at once", async (t) => {
  const flushMs = 20;
  const { store, path } = await tempSqliteStore(t);
  const keys = keyMemory(store, { keyUseFlushMs: flushMs });
  const observer = new Database(path, { readonly: true });
  t.after(() => observer.close());
  const { id } = await store.createKey(newKey('used'));
  await nextTurn();
  // Timers of one duration made in one turn fire in order, in one timers phase: a read opens the
  // turn's read transaction, the batch of key uses is written, then the observer looks.
  const lastUse = new Promise((resolve) => {
    setTimeout(() => void store.getPet(1n), flushMs);
    keys.noteKeyUse(id, Date.now());
    setTimeout(
      () => resolve(observer.prepare('SELECT last_used_at FROM api_keys WHERE id = ?').pluck().get(id)),
      flushMs,
    );
  });
  assert.notEqual(await lastUse, null);
});
