import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { InjectOptions } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { hashKey, keyHint, makeKey } from '../src/keys/keys.js';
import { keyMemory } from '../src/keys/memory.js';
import { assertError, manualClock, startApp } from './helpers.js';
import { storeKinds, type StoreKind } from './stores.js';

const INVALID_TOKEN = 'Bearer realm="petstore", error="invalid_token"';
const MINUTE = 60_000;

/** The service on a fresh database of `kind`, store and app on one hand-moved clock. */
async function appOn(t: TestContext, kind: StoreKind) {
  const database = await kind.migratedDatabase(t);
  const clock = manualClock();
  const store = database.open({ clock });
  await store.migrate();
  const app = await startApp(t, { store, clock });
  const as = (key: string) => (options: InjectOptions) =>
    app.app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
  return { ...app, as };
}

function assertExpired(response: Awaited<ReturnType<Awaited<ReturnType<typeof startApp>>['call']>>): string {
  const message = assertError(response, 401, 'unauthorized', 'expired');
  assert.equal(response.headers['www-authenticate'], INVALID_TOKEN);
  return message;
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: a key is accepted until its expiry by the service's clock, then refused 401 as expired`,
    { skip: kind.skip },
    async (t) => {
      const { store, clock, as } = await appOn(t, kind);
      const expiresAt = new Date(clock.now() + 5 * MINUTE);
      const { key } = await issueKey(store, 'short', new Date(clock.now()), { expiresAt });
      const call = as(key);
      assert.equal((await call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
      clock.set(expiresAt.getTime() - 1);
      // Just used, so remembered: memory must not outlive the expiry either.
      assert.equal((await call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
      clock.set(expiresAt.getTime());
      for (const options of [
        { method: 'GET', url: '/v1/pets' },
        { method: 'GET', url: '/v1/pets/1' },
        { method: 'POST', url: '/v1/pets', payload: '{bad json', headers: { 'content-type': 'application/json' } },
        { method: 'GET', url: '/metrics' },
      ] as InjectOptions[]) {
        const message = assertExpired(await call(options));
        assert.ok(message.includes(expiresAt.toISOString()), message);
      }
      const head = await call({ method: 'HEAD', url: '/v1/pets' });
      assert.equal(head.statusCode, 401);
      assert.equal(head.headers['www-authenticate'], INVALID_TOKEN);
    },
  );

  test(
    `${kind.name}: the key memory over the store never answers an expired key, by its own clock`,
    { skip: kind.skip },
    async (t) => {
      const database = await kind.migratedDatabase(t);
      let now = 1_700_000_000_000;
      const store = database.open();
      await store.migrate();
      const keys = keyMemory(store, { clock: { now: () => now } });
      const secret = makeKey();
      const hash = hashKey(secret);
      const expiresAt = new Date(now + 200);
      const key = await store.createKey({
        name: 'k',
        hint: keyHint(secret),
        hash,
        createdAt: new Date(now),
        expiresAt,
      });
      assert.deepEqual(await keys.findActiveKey(hash), {
        id: key.id,
        hash,
        scopes: ['pets:read', 'pets:write', 'metrics:read'],
        expiresAt: expiresAt.getTime(),
      });
      now += 199;
      assert.equal(keys.rememberedKey(hash)?.id, key.id);
      now += 1;
      assert.equal(keys.rememberedKey(hash), undefined, 'forgotten at its expiry, before 500 ms');
      // The lookup still finds it, with its expiry, so the service can say it expired.
      assert.equal((await keys.findActiveKey(hash))?.expiresAt, expiresAt.getTime());
      assert.equal(keys.rememberedKey(hash), undefined, 'an expired key is never remembered');
    },
  );
}

test('an unknown or revoked key is still refused as not valid, not as expired', async (t) => {
  const { store, as } = await appOn(t, storeKinds[0]!);
  const { key, record } = await issueKey(store, 'gone');
  await store.revokeKey(record.id, new Date());
  for (const token of [key, makeKey()]) {
    const message = assertError(await as(token)({ method: 'GET', url: '/v1/pets' }), 401, 'unauthorized');
    assert.doesNotMatch(message, /expired/);
  }
});

test("expiry follows the service's clock even while the key memory still remembers the key by the system's", async (t) => {
  const database = await storeKinds[0]!.createDatabase(t);
  const opened = database.open();
  await opened.migrate();
  let lookups = 0;
  const store = { ...opened, findActiveKey: (hash: Buffer) => (lookups++, opened.findActiveKey(hash)) };
  const clock = manualClock(Date.now());
  const { app } = await startApp(t, { store, clock });
  const expiresAt = new Date(Date.now() + 3_600_000);
  const { key } = await issueKey(store, 'hour', new Date(), { expiresAt });
  const call = () => app.inject({ url: '/v1/pets', headers: { authorization: `Bearer ${key}` } });
  assert.equal((await call()).statusCode, 200);
  assert.equal((await call()).statusCode, 200);
  assert.equal(lookups, 1, 'the second request is answered from memory, whose clock is the system one');
  clock.set(expiresAt.getTime());
  assertExpired(await call());
  assert.equal(lookups, 1, 'refused as expired while still remembered');
});
