import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { issueKey } from '../src/keys/issue.js';
import { batchKeyUses, KEY_USE_WRITE_MS } from '../src/keys/uses.js';
import type { KeyUse } from '../src/store/store.js';
import { appCountingWrites } from './helpers.js';
import { storeKinds } from './stores.js';

const FLUSH_MS = 20;

/** Waits until `count()` is `n`, a few seconds at most. */
async function until(count: () => Promise<number>, n: number) {
  const deadline = Date.now() + 7000;
  while ((await count()) !== n) {
    assert.ok(Date.now() < deadline, `never reached ${n} (at ${await count()})`);
    await sleep(10);
  }
}

async function lastUsed(store: { listKeys(): Promise<{ id: number; lastUsedAt: Date | null }[]> }, id: number) {
  return (await store.listKeys()).find((key) => key.id === id)!.lastUsedAt?.getTime() ?? null;
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: a key's last use is written once a minute per instance, not once a request`,
    { skip: kind.skip },
    async (t) => {
      const { call, clock, store, writes } = await appCountingWrites(t, kind, 'last_used_at', FLUSH_MS);
      const { id } = (await store.listKeys())[0]!;
      const t0 = clock.now();
      for (let i = 0; i < 30; i++) assert.equal((await call({ url: '/v1/pets' })).statusCode, 200);
      await until(writes, 1);
      assert.equal(await lastUsed(store, id), t0);

      clock.set(t0 + KEY_USE_WRITE_MS - 1);
      for (let i = 0; i < 30; i++) assert.equal((await call({ url: '/v1/pets' })).statusCode, 200);
      await sleep(FLUSH_MS * 10);
      assert.equal(await writes(), 1, 'no second write within the minute');
      assert.equal(await lastUsed(store, id), t0);

      clock.set(t0 + KEY_USE_WRITE_MS);
      for (let i = 0; i < 30; i++) assert.equal((await call({ url: '/v1/pets' })).statusCode, 200);
      await until(writes, 2);
      assert.equal(await lastUsed(store, id), t0 + KEY_USE_WRITE_MS);
    },
  );

  test(
    `${kind.name}: requests go on while the last use cannot be written, and it is written once it can`,
    { skip: kind.skip },
    async (t) => {
      const { app, clock, store, database, writes } = await appCountingWrites(t, kind, 'last_used_at', FLUSH_MS);
      const keys = await Promise.all(['a', 'b', 'c'].map((name) => issueKey(store, name)));
      const release = await database.blockWrites('api_keys');
      let released = false;
      t.after(() => (released ? undefined : release()));
      for (const minute of [0, 1, 2]) {
        clock.set(clock.now() + minute * KEY_USE_WRITE_MS);
        for (const { key } of keys) {
          const started = performance.now();
          const response = await app.inject({ url: '/v1/pets', headers: { authorization: `Bearer ${key}` } });
          assert.equal(response.statusCode, 200);
          assert.ok(performance.now() - started < 1000, 'no request waits for the write');
        }
        await sleep(FLUSH_MS * 3);
      }
      assert.equal(await writes(), 0);
      released = true;
      await release();
      const deadline = Date.now() + 7000;
      for (const { record } of keys) {
        while ((await lastUsed(store, record.id)) !== clock.now()) {
          assert.ok(Date.now() < deadline, 'the last use is written once the database takes writes again');
          await sleep(10);
        }
      }
      // PostgreSQL's first batch waited for the lock, then wrote too: still once a minute per key at most.
      assert.ok((await writes()) <= keys.length * 3);
    },
  );
}

test('batchKeyUses writes the uses of many keys in one batch and never throws to the caller', async () => {
  const batches: KeyUse[][] = [];
  let failing = true;
  const uses = batchKeyUses((batch) => {
    if (failing) throw new Error('database down');
    batches.push(batch);
  }, 60_000);
  uses.note(1, 1000);
  uses.note(2, 1000);
  uses.note(1, 2000);
  await uses.flush();
  assert.deepEqual(batches, [], 'the failed batch is kept');
  failing = false;
  uses.note(3, 3000);
  await uses.flush();
  assert.deepEqual(batches, [
    [
      { id: 1, at: 2000 },
      { id: 2, at: 1000 },
      { id: 3, at: 3000 },
    ],
  ]);
  uses.note(1, 2000 + KEY_USE_WRITE_MS - 1);
  await uses.flush();
  assert.equal(batches.length, 1, 'nothing new within the minute');
  uses.note(1, 2000 + KEY_USE_WRITE_MS);
  await uses.close();
  assert.deepEqual(batches[1], [{ id: 1, at: 2000 + KEY_USE_WRITE_MS }]);
});
