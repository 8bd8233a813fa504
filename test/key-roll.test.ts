import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { InjectOptions } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { hashKey, keyHint, makeKey } from '../src/keys/keys.js';
import type { KeyRoll, Store } from '../src/store/store.js';
import { assertError, manualClock, startApp } from './helpers.js';
import { storeKinds } from './stores.js';

const HOUR = 3_600_000;

/** A roll of key `id` at `at`, its successor a fresh key (returned too), the old key ending `grace` later. */
function rollOf(id: number, at: Date, grace: number, expiresAt: Date | null = null): [KeyRoll, string] {
  const key = makeKey();
  const successor = { hint: keyHint(key), hash: hashKey(key), createdAt: at, expiresAt };
  return [{ id, successor, oldExpiresAt: new Date(at.getTime() + grace), at }, key];
}

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  async function migrated(t: TestContext): Promise<Store> {
    const store = (await kind.migratedDatabase(t)).open();
    await store.migrate();
    return store;
  }

  it('rollKey issues a successor with the same name and scopes and sets the old key to expire', async (t) => {
    const store = await migrated(t);
    const at = new Date('2026-11-22T10:00:00.000Z');
    const { record } = await issueKey(store, 'dashboard', at, { scopes: ['pets:read', 'metrics:read'] });
    const ends = new Date(at.getTime() + 90 * 24 * HOUR);
    const [roll, key] = rollOf(record.id, at, 24 * HOUR, ends);
    const outcome = await store.rollKey(roll);
    assert.equal(outcome.kind, 'rolled');
    if (outcome.kind !== 'rolled') return;
    const { old, successor } = outcome;
    assert.deepEqual(
      [successor.name, successor.scopes, successor.expiresAt, successor.replacedBy],
      ['dashboard', ['pets:read', 'metrics:read'], ends, null],
    );
    assert.deepEqual([old.id, old.replacedBy, old.expiresAt], [record.id, successor.id, roll.oldExpiresAt]);
    assert.equal((await store.findActiveKey(hashKey(key)))?.id, successor.id);
    assert.deepEqual(await store.listKeys(), [old, successor]);
  });

  it('rolling a key that expires before the grace ends keeps its earlier expiry', async (t) => {
    const store = await migrated(t);
    const at = new Date('2026-11-22T10:00:00.000Z');
    const soon = new Date(at.getTime() + HOUR);
    const { record } = await issueKey(store, 'ci', at, { expiresAt: soon });
    const outcome = await store.rollKey(rollOf(record.id, at, 24 * HOUR)[0]);
    assert.equal(outcome.kind === 'rolled' && outcome.old.expiresAt?.getTime(), soon.getTime());
  });

  it('an unknown, revoked, expired or already rolled key is not rolled, and nothing changes', async (t) => {
    const store = await migrated(t);
    const at = new Date('2026-11-22T10:00:00.000Z');
    const { record: revoked } = await issueKey(store, 'revoked', at);
    await store.revokeKey(revoked.id, at);
    const { record: expired } = await issueKey(store, 'expired', at, { expiresAt: new Date(at.getTime() + 1000) });
    const { record: rolled } = await issueKey(store, 'rolled', at);
    const first = await store.rollKey(rollOf(rolled.id, at, HOUR)[0]);
    assert.equal(first.kind, 'rolled');
    const before = await store.listKeys();
    const later = new Date(at.getTime() + 1000);
    assert.deepEqual(await store.rollKey(rollOf(9999, later, HOUR)[0]), { kind: 'unknown' });
    assert.deepEqual(await store.rollKey(rollOf(revoked.id, later, HOUR)[0]), { kind: 'revoked' });
    assert.deepEqual(await store.rollKey(rollOf(expired.id, later, HOUR)[0]), { kind: 'expired' });
    assert.deepEqual(await store.rollKey(rollOf(rolled.id, later, HOUR)[0]), {
      kind: 'replaced',
      by: first.kind === 'rolled' ? first.successor.id : -1,
    });
    assert.deepEqual(await store.listKeys(), before);
  });

  it('ten rolls of one key at once on two instances: one wins, the others are told it was replaced', async (t) => {
    const database = await kind.migratedDatabase(t);
    const stores = [database.open(), database.open()];
    await Promise.all(stores.map((store) => store.migrate()));
    const at = new Date();
    const { record } = await issueKey(stores[0]!, 'contended', at);
    const outcomes = await Promise.all(
      Array.from({ length: 10 }, (_, i) => stores[i % 2]!.rollKey(rollOf(record.id, at, HOUR)[0])),
    );
    const won = outcomes.filter((outcome) => outcome.kind === 'rolled');
    assert.equal(won.length, 1);
    const winner = won[0]!.kind === 'rolled' ? won[0]!.successor.id : -1;
    for (const outcome of outcomes) {
      if (outcome.kind !== 'rolled') assert.deepEqual(outcome, { kind: 'replaced', by: winner });
    }
    const keys = await stores[1]!.listKeys();
    assert.deepEqual(
      keys.map((key) => [key.id, key.replacedBy]),
      [
        [record.id, winner],
        [winner, null],
      ],
      'one successor, and no other key was left behind',
    );
  });

  it('a rolled key and its successor both work through the grace, and only the successor after', async (t) => {
    const database = await kind.migratedDatabase(t);
    const clock = manualClock();
    const store = database.open({ clock });
    await store.migrate();
    const { app } = await startApp(t, { store, clock });
    const { key: old, record } = await issueKey(store, 'ci', new Date(clock.now()), { scopes: ['pets:read'] });
    const as = (key: string) => (options: InjectOptions) =>
      app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
    assert.equal((await as(old)({ url: '/v1/pets' })).statusCode, 200);
    const [roll, successor] = rollOf(record.id, new Date(clock.now()), HOUR);
    assert.equal((await store.rollKey(roll)).kind, 'rolled');
    for (const offset of [0, HOUR / 2, HOUR - 1]) {
      clock.set(roll.at.getTime() + offset);
      assert.equal((await as(old)({ url: '/v1/pets' })).statusCode, 200, `old key at +${offset} ms`);
      assert.equal((await as(successor)({ url: '/v1/pets' })).statusCode, 200, `successor at +${offset} ms`);
    }
    assert.equal(
      (await as(successor)({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } })).statusCode,
      403,
      'the successor holds the same scopes, no more',
    );
    clock.set(roll.at.getTime() + HOUR);
    assertError(await as(old)({ url: '/v1/pets' }), 401, 'unauthorized', 'expired');
    assert.equal((await as(successor)({ url: '/v1/pets' })).statusCode, 200);
  });
}
