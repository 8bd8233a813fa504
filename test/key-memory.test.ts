import assert from 'node:assert/strict';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import type { Clock } from '../src/clock.js';
import { hashKey, keyHint, makeKey } from '../src/keys/keys.js';
import { keyMemory, rememberActiveKeys } from '../src/keys/memory.js';
import { storeKinds, type StoreKind } from './stores.js';

/**
 * A migrated store with one active key, the key memory over it, which has looked the key up
 * once, and a way to revoke that key around the store, as another instance or the keys command would.
 */
async function storeWithKey(t: TestContext, kind: StoreKind, clock?: Clock) {
  const database = await kind.migratedDatabase(t);
  const store = database.open();
  await store.migrate();
  const keys = keyMemory(store, { clock });
  const secret = makeKey();
  const hash = hashKey(secret);
  const key = await store.createKey({ name: 'k', hint: keyHint(secret), hash, createdAt: new Date() });
  assert.equal((await keys.findActiveKey(hash))?.id, key.id);
  const revokeAround = async () => {
    await database.execute(`UPDATE api_keys SET revoked_at = '2026-11-22T00:00:00Z' WHERE id = ${key.id}`);
    // Another process revokes in its own time: the store's next turn reads after it (the SQLite
    // store's reads of one turn share one snapshot, taken by the turn's first read).
    await nextTurn();
  };
  return { keys, hash, key, revokeAround };
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: a key revoked on another connection is refused within one second`,
    { skip: kind.skip },
    async (t) => {
      const { keys, hash, revokeAround } = await storeWithKey(t, kind);
      await revokeAround();
      const revokedAt = Date.now();
      while ((await keys.findActiveKey(hash)) !== undefined) {
        assert.ok(Date.now() - revokedAt < 1000, 'still accepted a second after the revocation');
        await sleep(20);
      }
      assert.ok(Date.now() - revokedAt < 1000);
    },
  );

  test(
    `${kind.name}: a key revoked around the store is refused once the key memory's clock passes 500 ms`,
    { skip: kind.skip },
    async (t) => {
      let now = 1_700_000_000_000;
      const { keys, hash, key, revokeAround } = await storeWithKey(t, kind, { now: () => now });
      await revokeAround();
      now += 499;
      assert.equal(keys.rememberedKey(hash)?.id, key.id, 'remembered while the clock is under 500 ms');
      assert.equal((await keys.findActiveKey(hash))?.id, key.id);
      now += 1;
      assert.equal(keys.rememberedKey(hash), undefined);
      assert.equal(await keys.findActiveKey(hash), undefined);
    },
  );
}

test('an active key is answered from memory for 500 ms by the injected clock, then looked up again', async () => {
  let now = 1_700_000_000_000;
  const key = { id: 7, hash: hashKey(makeKey()), scopes: [], expiresAt: null };
  let lookups = 0;
  const keys = rememberActiveKeys(
    () => {
      lookups += 1;
      return key;
    },
    { now: () => now },
  );
  assert.equal(keys.remembered(key.hash), undefined, 'nothing is remembered before the first lookup');
  assert.equal(await keys.find(key.hash), key);
  now += 499;
  assert.equal(await keys.find(key.hash), key);
  assert.equal(keys.remembered(key.hash), key);
  assert.equal(lookups, 1);
  now += 1;
  assert.equal(keys.remembered(key.hash), undefined, 'forgotten 500 ms after the lookup');
  assert.equal(await keys.find(key.hash), key);
  assert.equal(lookups, 2);
  keys.forget();
  assert.equal(keys.remembered(key.hash), undefined);
});

test('a key is remembered until 500 ms later or its expiry, whichever comes first, and an expired one not at all', async () => {
  let now = 1_700_000_000_000;
  const expiring = { id: 8, hash: hashKey(makeKey()), scopes: ['pets:read' as const], expiresAt: now + 200 };
  const keys = rememberActiveKeys(() => expiring, { now: () => now });
  assert.equal(await keys.find(expiring.hash), expiring);
  now += 199;
  assert.equal(keys.remembered(expiring.hash), expiring);
  now += 1;
  assert.equal(keys.remembered(expiring.hash), undefined, 'forgotten at its expiry');
  assert.equal(await keys.find(expiring.hash), expiring, 'still found, so the service can say it expired');
  assert.equal(keys.remembered(expiring.hash), undefined, 'never remembered once expired');
});
