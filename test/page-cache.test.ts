import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { CACHE_BYTES, FULL_ADMITS_ONE_IN, PageCache } from '../src/pets/page-cache.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/store.js';
import { startApp, storeFailingLists, tempSqliteStore, type TestApp } from './helpers.js';
import { exchange, parseResponse } from './raw.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

interface Listening extends TestApp {
  port: number;
  /** Pages read from the store so far. */
  reads: () => number;
  get(path: string, init?: RequestInit): Promise<Response>;
}

/** The service on a real socket, on a store that counts the pages read from it. */
async function listening(
  t: TestContext,
  { pets = 45, env = {}, store: given }: { pets?: number; env?: Record<string, string>; store?: Store } = {},
): Promise<Listening> {
  const real = given ?? (await tempSqliteStore(t)).store;
  let reads = 0;
  const store: Store = {
    ...real,
    listPets: (query) => {
      reads += 1;
      return real.listPets(query);
    },
  };
  const app = await startApp(t, { env, store });
  for (let i = 1; i <= pets; i++)
    await app.store.createPet({ name: `Pet ${i}`, categoryId: BigInt(i), status: 'available' });
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as { port: number };
  const get = (path: string, init: RequestInit = {}) =>
    fetch(`http://127.0.0.1:${port}${path}`, {
      ...init,
      headers: { authorization: `Bearer ${app.key}`, ...(init.headers as Record<string, string>) },
    });
  return { ...app, port, reads: () => reads, get };
}

const fieldsOf = (response: Response) => {
  const fields = Object.fromEntries(response.headers);
  delete fields.date;
  return fields;
};

test('a full page asked for a third time is answered from the cache, field for field as the route answered it', async (t) => {
  const app = await listening(t);
  const first = await app.get('/v1/pets?limit=20');
  const firstBody = await first.text();
  // The second request for a URL keeps its page (a walk that visits each page once keeps none).
  await (await app.get('/v1/pets?limit=20')).text();
  assert.equal(app.reads(), 2);
  const second = await app.get('/v1/pets?limit=20');
  const secondBody = await second.text();
  assert.equal(app.reads(), 2, 'the third answer read the store');

  assert.equal(second.status, 200);
  assert.equal(secondBody, firstBody);
  assert.equal(JSON.parse(secondBody).length, 20);
  const [a, b] = [fieldsOf(first), fieldsOf(second)];
  assert.match(a['x-request-id']!, UUID);
  assert.match(b['x-request-id']!, UUID);
  assert.notEqual(a['x-request-id'], b['x-request-id']);
  assert.equal(a.ratelimit, '"default";r=5999;t=60');
  assert.equal(b.ratelimit, '"default";r=5997;t=60');
  for (const fields of [a, b]) {
    delete fields['x-request-id'];
    delete fields.ratelimit;
  }
  assert.deepEqual(b, a);
  assert.equal(a.link, `</v1/pets?limit=20&cursor=${Buffer.from(':20').toString('base64url')}>; rel="next"`);
  assert.equal(a['content-type'], 'application/json; charset=utf-8');
  assert.equal(a['cache-control'], 'no-store');
  assert.equal(a['x-content-type-options'], 'nosniff');
  assert.equal(a['content-length'], String(Buffer.byteLength(firstBody)));

  // Counted and timed like any other answer.
  const metrics = await (await app.get('/metrics')).text();
  assert.match(metrics, /^petstore_http_requests_total\{operation="listPets",method="GET",status="200"\} 3$/m);
  assert.match(
    metrics,
    /^petstore_http_request_duration_seconds_count\{operation="listPets",method="GET",status="200"\} 3$/m,
  );
});

test('a cached page is sent even when the store fails: the rows are not read again', async (t) => {
  const { store, failing } = await storeFailingLists(t);
  const app = await listening(t, { store });
  const first = await (await app.get('/v1/pets?limit=10&status=available')).text();
  await (await app.get('/v1/pets?limit=10&status=available')).text();
  // Asked for once only: not kept.
  assert.equal((await app.get('/v1/pets?limit=11&status=available')).status, 200);
  failing.on = true;
  const again = await app.get('/v1/pets?limit=10&status=available');
  assert.equal(again.status, 200);
  assert.equal(await again.text(), first);
  // HEAD goes through Fastify, whose route sends the same cached page.
  const head = await app.get('/v1/pets?limit=10&status=available', { method: 'HEAD' });
  assert.equal(head.status, 200);
  assert.equal(head.headers.get('content-length'), String(Buffer.byteLength(first)));
  // A page asked for once before was not kept: it is read, and fails.
  assert.equal((await app.get('/v1/pets?limit=11&status=available')).status, 500);
});

test('the last page of a listing is read afresh, so a new animal shows on it at once', async (t) => {
  const app = await listening(t, { pets: 30 });
  const first = await app.get('/v1/pets?limit=20');
  const next = /<([^>]+)>; rel="next"/.exec(first.headers.get('link')!)![1]!;
  const firstBody = await first.text();
  const count = async () => ((await (await app.get(next)).json()) as unknown[]).length;
  assert.equal(await count(), 10);
  assert.equal(await count(), 10);
  await app.store.createPet({ name: 'Newcomer', categoryId: 1n, status: 'available' });
  const last = (await (await app.get(next)).json()) as { name: string }[];
  assert.equal(last.length, 11);
  assert.equal(last.at(-1)!.name, 'Newcomer');
  assert.equal(await (await app.get('/v1/pets?limit=20')).text(), firstBody);
  // No Link on a page that ends the listing, and so nothing cached: each was read.
  assert.equal((await app.get(next)).headers.get('link'), null);
});

test('a key revoked elsewhere is refused on a cached page within one second', async (t) => {
  const { store, path } = await tempSqliteStore(t);
  const app = await listening(t, { store });
  assert.equal((await app.get('/v1/pets?limit=5')).status, 200);
  assert.equal((await app.get('/v1/pets?limit=5')).status, 200);
  // Another process's store, as `petstore keys revoke` would use.
  const other = openSqliteStore(path);
  t.after(() => other.close());
  await other.migrate();
  const [key] = await other.listKeys();
  assert.equal(await other.revokeKey(key!.id, new Date()), true);
  const revokedAt = Date.now();
  let response = await app.get('/v1/pets?limit=5');
  while (response.status === 200) {
    assert.ok(Date.now() - revokedAt < 1000, 'a revoked key was still served a second later');
    await sleep(20);
    response = await app.get('/v1/pets?limit=5');
  }
  assert.equal(response.status, 401);
  assert.equal(response.headers.get('www-authenticate'), 'Bearer realm="petstore", error="invalid_token"');
  assert.equal(((await response.json()) as { code: string }).code, 'unauthorized');
});

test('cached answers count toward the rate limit once each, and past it get 429 with the RateLimit fields', async (t) => {
  const app = await listening(t, { env: { PETSTORE_RATE_LIMIT: '4' } });
  const remaining = [];
  for (let i = 0; i < 4; i++) {
    const response = await app.get('/v1/pets?limit=20');
    assert.equal(response.status, 200);
    remaining.push(response.headers.get('ratelimit'));
  }
  assert.deepEqual(
    remaining,
    [0, 1, 2, 3].map((used) => `"default";r=${3 - used};t=60`),
  );
  const refused = await app.get('/v1/pets?limit=20');
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get('ratelimit'), '"default";r=0;t=60');
  assert.equal(refused.headers.get('ratelimit-policy'), '"default";q=4;w=60');
  assert.equal(refused.headers.get('retry-after'), '60');
  assert.match(refused.headers.get('x-request-id')!, UUID);
  assert.equal(((await refused.json()) as { code: string }).code, 'rate_limited');
});

test('refused keys from an address get 429 with their policy on a cached URL, while its valid key is served from the cache', async (t) => {
  const app = await listening(t, { env: { PETSTORE_AUTH_FAILURE_LIMIT: '3' } });
  for (let i = 0; i < 2; i++) await (await app.get('/v1/pets?limit=20')).text();
  const bad = { headers: { authorization: `Bearer psk_${'A'.repeat(43)}` } };
  for (let i = 0; i < 3; i++) assert.equal((await app.get('/v1/pets?limit=20', bad)).status, 401);
  for (const method of ['GET', 'HEAD']) {
    const refused = await app.get('/v1/pets?limit=20', { ...bad, method });
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get('ratelimit-policy'), '"refused-keys";q=3;w=60');
    assert.equal(refused.headers.get('ratelimit'), '"refused-keys";r=0;t=60');
    assert.equal(refused.headers.get('retry-after'), '60');
  }
  const before = app.reads();
  const served = await app.get('/v1/pets?limit=20');
  assert.equal(served.status, 200);
  assert.equal(JSON.parse(await served.text()).length, 20);
  assert.equal(app.reads(), before, 'the valid key was answered from the cache');
});

test('anything but a valid key on a cached URL gets the route’s own refusal', async (t) => {
  const app = await listening(t);
  await app.get('/v1/pets?limit=20');
  const missing = await fetch(`http://127.0.0.1:${app.port}/v1/pets?limit=20`);
  assert.equal(missing.status, 401);
  assert.equal(missing.headers.get('www-authenticate'), 'Bearer realm="petstore"');
  const wrong = await app.get('/v1/pets?limit=20', { headers: { authorization: `Bearer psk_${'A'.repeat(43)}` } });
  assert.equal(wrong.status, 401);
  assert.equal(wrong.headers.get('www-authenticate'), 'Bearer realm="petstore", error="invalid_token"');
  const basic = await app.get('/v1/pets?limit=20', { headers: { authorization: 'Basic dXNlcjpwYXNz' } });
  assert.equal(basic.status, 401);
  // RFC 9112 section 3.2: HTTP/1.1 without Host is a 400, cached URL or not.
  const raw = parseResponse(
    await exchange(app.port, `GET /v1/pets?limit=20 HTTP/1.1\r\nAuthorization: Bearer ${app.key}\r\n\r\n`),
  );
  assert.equal(raw.statusLine, 'HTTP/1.1 400 Bad Request');
  assert.equal(JSON.parse(raw.body).code, 'invalid_request');
  // A wrong method on the same URL is still a 405.
  assert.equal((await app.get('/v1/pets?limit=20', { method: 'PUT' })).status, 405);
});

test('with CORS on a page is kept and sent with the CORS fields; on a store whose pages can change every page is read', async (t) => {
  for (const { env, idsVisibleInOrder, reads } of [
    { env: { PETSTORE_CORS_ORIGINS: 'https://shop.example' }, idsVisibleInOrder: true, reads: 2 },
    { env: {}, idsVisibleInOrder: false, reads: 3 },
  ]) {
    const { store: real } = await tempSqliteStore(t);
    const app = await listening(t, { store: { ...real, idsVisibleInOrder }, env, pets: 25 });
    const origin = { headers: { origin: 'https://shop.example' } };
    for (let i = 0; i < 3; i++) {
      const response = await app.get('/v1/pets?limit=20', origin);
      assert.equal(response.status, 200);
      // CORS applies to every answer, cached or read.
      const allowed = env.PETSTORE_CORS_ORIGINS ? 'https://shop.example' : null;
      assert.equal(response.headers.get('access-control-allow-origin'), allowed);
    }
    assert.equal(app.reads(), reads);
  }
});

test('PageCache keeps a page from its second request on, within CACHE_BYTES, and once full takes few new ones', () => {
  const pages = new PageCache();
  const page = (i: number) => ({ body: `[${'x'.repeat(1000)}${i}]`, bytes: 1004, link: `<next ${i}>` });
  const offer = (i: number) => {
    const url = `/v1/pets?cursor=${i}`;
    if (pages.wanted(url)) pages.set(url, page(i));
  };
  offer(0);
  assert.equal(pages.get('/v1/pets?cursor=0'), undefined, 'kept after one request');
  offer(0);
  assert.deepEqual(pages.get('/v1/pets?cursor=0'), page(0));
  let i = 1;
  while (pages.size + 1100 <= CACHE_BYTES) {
    offer(i);
    offer(i);
    i += 1;
  }
  const full = i;
  for (let n = 0; n < FULL_ADMITS_ONE_IN * 10; n++, i++) {
    offer(i);
    offer(i);
  }
  assert.ok(pages.size <= CACHE_BYTES, `${pages.size} kept`);
  const kept = Array.from({ length: i - full }, (_, n) => pages.get(`/v1/pets?cursor=${full + n}`)).filter(Boolean);
  assert.equal(kept.length, 10, 'once full, one new page in FULL_ADMITS_ONE_IN is kept');
  assert.equal(pages.get('/v1/pets?cursor=0'), undefined, 'the oldest made room');
  assert.deepEqual(pages.get(`/v1/pets?cursor=${full - 1}`), page(full - 1));
});
