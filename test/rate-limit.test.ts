import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LightMyRequestResponse } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { openPostgresStore } from '../src/store/postgres.js';
import { assertError, manualClock, startApp } from './helpers.js';
import { createPostgresSchema, postgresSkip, storeKinds } from './stores.js';

const PET = { name: 'Rex', categoryId: 7 };
const BAD_KEY = `psk_${'A'.repeat(43)}`;

function assertFields(response: LightMyRequestResponse, policy: string, remaining: number, seconds: number) {
  assert.equal(response.headers['ratelimit-policy'], policy);
  assert.equal(response.headers.ratelimit, `"default";r=${remaining};t=${seconds}`);
}

test('every authenticated answer carries RateLimit-Policy and RateLimit, counting down', async (t) => {
  const app = await startApp(t);
  const policy = '"default";q=6000;w=60';
  assertFields(await app.call({ method: 'GET', url: '/v1/pets' }), policy, 5999, 60);
  assertFields(await app.call({ method: 'POST', url: '/v1/pets', payload: PET }), policy, 5998, 60);
  assertFields(await app.call({ method: 'GET', url: '/v1/pets/99' }), policy, 5997, 60);
  assertFields(await app.call({ method: 'GET', url: '/v1/pets?limit=0' }), policy, 5996, 60);
  app.clock.set(app.clock.now() + 15_500);
  assertFields(await app.call({ method: 'GET', url: '/v1/pets' }), policy, 5995, 45);
  // Not the key's on answers to requests that were not authenticated: a 401 carries the
  // address's refused-key fields instead, the public answers none.
  const unauthenticated = await app.call({ method: 'GET', url: '/v1/pets', headers: { authorization: '' } });
  assert.equal(unauthenticated.headers['ratelimit-policy'], '"refused-keys";q=60;w=60');
  assert.equal(unauthenticated.headers.ratelimit, '"refused-keys";r=60;t=45');
  for (const response of [
    await app.call({ method: 'GET', url: '/v1/openapi.json' }),
    await app.call({ method: 'GET', url: '/v1/nothing' }),
  ]) {
    assert.equal(response.headers.ratelimit, undefined);
    assert.equal(response.headers['ratelimit-policy'], undefined);
  }
});

test('a key past its limit gets 429 with Retry-After while another key is served, until the window ends', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: '5', PETSTORE_RATE_LIMIT_WINDOW: '10' } });
  const { key: quiet } = await issueKey(app.store, 'quiet');
  app.clock.set(app.clock.now() + 3_000);
  for (let i = 0; i < 5; i++) assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
  const refused = await app.call({ method: 'POST', url: '/v1/pets', payload: PET });
  assertError(refused, 429, 'rate_limited', '5 requests in 10 seconds', '7 seconds');
  assert.equal(refused.headers['retry-after'], '7');
  assertFields(refused, '"default";q=5;w=10', 0, 7);
  assert.equal((await app.store.listPets({ limit: 10 })).length, 0, 'a refused create stores nothing');

  const served = await app.call({ method: 'GET', url: '/v1/pets', headers: { authorization: `Bearer ${quiet}` } });
  assert.equal(served.statusCode, 200);
  assertFields(served, '"default";q=5;w=10', 4, 7);

  app.clock.set(app.clock.now() + 7_000);
  const again = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(again.statusCode, 200);
  assertFields(again, '"default";q=5;w=10', 4, 10);
});

test('PETSTORE_RATE_LIMIT=off sends no RateLimit fields and refuses nothing', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: 'off' } });
  const response = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(response.statusCode, 200);
  assert.equal(response.headers.ratelimit, undefined);
  assert.equal(response.headers['ratelimit-policy'], undefined);
});

/** Asserts a 429 carries Retry-After and the RateLimit fields of `policy`, all telling the same wait. */
function assert429(response: LightMyRequestResponse, policy: string, quota: number, window: number, seconds: number) {
  assert.equal(response.statusCode, 429, response.body);
  assert.equal(response.headers['retry-after'], String(seconds));
  assert.equal(response.headers['ratelimit-policy'], `"${policy}";q=${quota};w=${window}`);
  assert.equal(response.headers.ratelimit, `"${policy}";r=0;t=${seconds}`);
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: past the refused-key limit a bad key gets 429 with its policy, and a valid key from the address is served`,
    { skip: kind.skip },
    async (t) => {
      const database = await kind.migratedDatabase(t);
      const store = database.open();
      await store.migrate();
      const app = await startApp(t, { store });
      const from = (remoteAddress: string, key: string, method: 'GET' | 'HEAD' | 'POST' = 'GET') =>
        app.app.inject({
          method,
          url: '/v1/pets',
          remoteAddress,
          headers: { authorization: `Bearer ${key}` },
          ...(method === 'POST' && { payload: PET }),
        });
      // Requests with no key at all are not guesses and do not count.
      for (let i = 0; i < 5; i++) {
        assertError(
          await app.app.inject({ method: 'GET', url: '/v1/pets', remoteAddress: '192.0.2.7' }),
          401,
          'unauthorized',
        );
      }
      for (let i = 0; i < 60; i++)
        assertError(await from('192.0.2.7', `${BAD_KEY.slice(0, -2)}${i}`), 401, 'unauthorized');
      app.clock.set(app.clock.now() + 20_000);
      for (let i = 60; i < 100; i++) {
        const refused = await from('192.0.2.7', BAD_KEY);
        assertError(refused, 429, 'rate_limited', '192.0.2.7', '40 seconds', 'valid key');
        assert429(refused, 'refused-keys', 60, 60, 40);
      }
      // HEAD and every operation alike, and the valid key of the very same address is served.
      assert429(await from('192.0.2.7', BAD_KEY, 'HEAD'), 'refused-keys', 60, 60, 40);
      assert429(await from('192.0.2.7', BAD_KEY, 'POST'), 'refused-keys', 60, 60, 40);
      const served = await from('192.0.2.7', app.key);
      assert.equal(served.statusCode, 200);
      assertFields(served, '"default";q=6000;w=60', 5999, 40);
      assert.equal((await from('192.0.2.7', app.key, 'HEAD')).statusCode, 200);
      assert.equal((await from('192.0.2.7', app.key, 'POST')).statusCode, 201);
      // Another address is not affected; the next window starts afresh.
      assertError(await from('192.0.2.8', BAD_KEY), 401, 'unauthorized');
      app.clock.set(app.clock.now() + 40_000);
      assertError(await from('192.0.2.7', BAD_KEY), 401, 'unauthorized');
    },
  );

  test(
    `${kind.name}: a key past its own limit gets 429 with its policy, on GET, HEAD and POST`,
    { skip: kind.skip },
    async (t) => {
      const database = await kind.migratedDatabase(t);
      const store = database.open();
      await store.migrate();
      const app = await startApp(t, { store, env: { PETSTORE_RATE_LIMIT: '2', PETSTORE_RATE_LIMIT_WINDOW: '30' } });
      for (let i = 0; i < 2; i++) assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
      for (const method of ['GET', 'HEAD', 'POST'] as const) {
        const refused = await app.call({ method, url: '/v1/pets', ...(method === 'POST' && { payload: PET }) });
        assert429(refused, 'default', 2, 30, 30);
        if (method !== 'HEAD') assertError(refused, 429, 'rate_limited', '30 seconds');
      }
    },
  );
}

test('PETSTORE_AUTH_FAILURE_LIMIT=off answers every refused key 401', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_AUTH_FAILURE_LIMIT: 'off' } });
  for (let i = 0; i < 80; i++) {
    assertError(
      await app.call({ method: 'GET', url: '/v1/pets', headers: { authorization: `Bearer ${BAD_KEY}` } }),
      401,
      'unauthorized',
    );
  }
});

test('behind a trusted proxy, the address limited is the client X-Forwarded-For names, when it is an address', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_AUTH_FAILURE_LIMIT: '1', PETSTORE_TRUST_PROXY: '10.0.0.0/8' } });
  const via = (client: string, key: string, proxy = '10.1.2.3') =>
    app.app.inject({
      method: 'GET',
      url: '/v1/pets',
      remoteAddress: proxy,
      headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': client },
    });
  assertError(await via('198.51.100.1', BAD_KEY), 401, 'unauthorized');
  assertError(await via('198.51.100.1', BAD_KEY), 429, 'rate_limited', '198.51.100.1');
  assertError(await via('2001:db8::1', BAD_KEY), 401, 'unauthorized');
  assertError(await via('2001:db8::1', BAD_KEY), 429, 'rate_limited', '2001:db8::1');
  assert.equal((await via('198.51.100.1', app.key)).statusCode, 200);
  assertError(await via('198.51.100.2', BAD_KEY), 401, 'unauthorized');
  // An untrusted peer cannot pick its address with the header.
  assertError(await via('198.51.100.3', BAD_KEY, '203.0.113.9'), 401, 'unauthorized');
  assertError(await via('198.51.100.4', BAD_KEY, '203.0.113.9'), 429, 'rate_limited', '203.0.113.9');
  // A value that is not an address is not used, nor echoed: the proxy's own address counts.
  for (const junk of ['not-an-address', '<script>', `x${'\u001b'}[31m`, '999.1.1.1', 'a'.repeat(300)]) {
    const refused = await via(junk, BAD_KEY, '10.9.9.9');
    const message = JSON.parse(refused.body).message as string;
    assert.ok(!message.includes(junk.slice(0, 8)), message);
  }
  assertError(await via('unknown', BAD_KEY, '10.9.9.9'), 429, 'rate_limited', '10.9.9.9');
});

test(
  'two instances on one PostgreSQL database share a key limit, beyond it by at most what the other admitted in two flush intervals',
  { skip: postgresSkip },
  async (t) => {
    const url = await createPostgresSchema(t);
    const FLUSH_MS = 40;
    const [storeA, storeB] = [openPostgresStore(url), openPostgresStore(url)];
    t.after(() => Promise.all([storeA.close(), storeB.close()]));
    await storeA.migrate();
    const LIMIT = 20;
    const env = { PETSTORE_RATE_LIMIT: String(LIMIT) };
    const clock = manualClock();
    const a = await startApp(t, { env, store: storeA, clock, hitFlushMs: FLUSH_MS });
    const b = await startApp(t, { env, store: storeB, clock, hitFlushMs: FLUSH_MS });
    const noisy = { authorization: `Bearer ${a.key}` };
    const send = (app: typeof a, n: number) =>
      Promise.all(Array.from({ length: n }, () => app.app.inject({ method: 'GET', url: '/v1/pets', headers: noisy })));
    const admitted = (responses: LightMyRequestResponse[]) => responses.filter((r) => r.statusCode === 200).length;

    // Paced: each step sends STEP requests to each instance, then waits for both to write and
    // read the totals. An instance is blind at most to the other's last two steps.
    const STEP = 2;
    let total = 0;
    let last: LightMyRequestResponse[] = [];
    for (let step = 0; step < 20; step++) {
      last = [...(await send(a, STEP)), ...(await send(b, STEP))];
      total += admitted(last);
      await sleep(FLUSH_MS * 4);
    }
    assert.ok(total >= LIMIT, `${total} admitted, at least the limit`);
    assert.ok(total <= LIMIT + 2 * 2 * STEP, `${total} admitted, within the limit + 2 instances × 2 steps of ${STEP}`);
    for (const refused of last) assert429(refused, 'default', LIMIT, 60, 60);

    // A burst inside one flush interval: each instance refuses on its own count at least, so
    // never more than 2 × the limit in a window.
    clock.set(clock.now() + 60_000);
    const burst = await Promise.all([send(a, 3 * LIMIT), send(b, 3 * LIMIT)]);
    const inBurst = admitted(burst.flat());
    assert.ok(inBurst >= LIMIT && inBurst <= 2 * LIMIT, `${inBurst} admitted in a burst`);
    await sleep(FLUSH_MS * 4);
    assert429((await send(a, 1))[0]!, 'default', LIMIT, 60, 60);
    assert429((await send(b, 1))[0]!, 'default', LIMIT, 60, 60);
    // b's own key is counted apart.
    assert.equal((await b.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
  },
);

test('the OpenAPI document lists Retry-After and both policies’ RateLimit fields on every 429', async (t) => {
  const { app } = await startApp(t);
  const document = JSON.parse((await app.inject({ url: '/v1/openapi.json' })).body) as {
    paths: Record<
      string,
      Record<string, { responses: Record<string, { headers?: Record<string, { description: string }> }> }>
    >;
  };
  let seen = 0;
  for (const item of Object.values(document.paths)) {
    for (const operation of Object.values(item)) {
      const refused = operation.responses['429'];
      if (!refused) continue;
      seen += 1;
      for (const name of ['RateLimit', 'RateLimit-Policy', 'Retry-After']) assert.ok(refused.headers?.[name], name);
      assert.match(refused.headers!['RateLimit-Policy']!.description, /"refused-keys"/);
    }
  }
  assert.ok(seen >= 3, `${seen} operations document a 429`);
});
