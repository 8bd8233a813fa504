import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { hashKey, keyHint, makeKey } from '../src/keys/keys.js';
import { storeKinds } from './stores.js';

for (const kind of storeKinds) {
  test(
    `${kind.name}: a key revoked on another connection is refused within one second`,
    { skip: kind.skip },
    async (t) => {
      const database = await kind.createDatabase(t);
      const store = database.open();
      await store.migrate();
      const secret = makeKey();
      const hash = hashKey(secret);
      const key = await store.createKey({ name: 'k', hint: keyHint(secret), hash, createdAt: new Date() });
      assert.equal((await store.findActiveKey(hash))?.id, key.id);
      // Around the store, as another instance or the keys command would.
      await database.execute(`UPDATE api_keys SET revoked_at = '2026-11-22T00:00:00Z' WHERE id = ${key.id}`);
      const revokedAt = Date.now();
      while ((await store.findActiveKey(hash)) !== undefined) {
        assert.ok(Date.now() - revokedAt < 1000, 'still accepted a second after the revocation');
        await sleep(20);
      }
      assert.ok(Date.now() - revokedAt < 1000);
    },
  );
}
