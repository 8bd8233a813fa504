import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import type { InjectOptions } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { hashKey, makeKey } from '../src/keys/keys.js';
import type { Scope } from '../src/schemas.js';
import { addPet, assertError, manualClock, startApp } from './helpers.js';
import { storeKinds, type StoreKind } from './stores.js';

const challenge = (scope: Scope) => `Bearer realm="petstore", error="insufficient_scope", scope="${scope}"`;

/** The service on a fresh database of `kind`, with a key for each of `scopes` besides the test's own. */
async function appWithKeys(t: TestContext, kind: StoreKind) {
  const database = await kind.migratedDatabase(t);
  const clock = manualClock();
  const store = database.open({ clock });
  await store.migrate();
  const app = await startApp(t, { store, clock });
  const keyWith = async (...scopes: Scope[]) => {
    const { key } = await issueKey(store, scopes.join(' '), new Date(), { scopes });
    return (options: InjectOptions) =>
      app.app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
  };
  return { ...app, database, keyWith };
}

function assertForbidden(response: Awaited<ReturnType<Awaited<ReturnType<typeof startApp>>['call']>>, scope: Scope) {
  assertError(response, 403, 'forbidden', scope);
  assert.equal(response.headers['www-authenticate'], challenge(scope));
}

const pet = { name: 'Rex', categoryId: 7 };

for (const kind of storeKinds) {
  test(
    `${kind.name}: a pets:read key lists and gets animals but is refused 403 on create`,
    { skip: kind.skip },
    async (t) => {
      const { call, keyWith } = await appWithKeys(t, kind);
      const { id } = await addPet({ call });
      const reader = await keyWith('pets:read');
      assert.equal((await reader({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
      assert.equal((await reader({ method: 'HEAD', url: '/v1/pets' })).statusCode, 200);
      assert.equal((await reader({ method: 'GET', url: `/v1/pets/${id}` })).statusCode, 200);
      assertForbidden(await reader({ method: 'POST', url: '/v1/pets', payload: pet }), 'pets:write');
      assertForbidden(await reader({ method: 'GET', url: '/metrics' }), 'metrics:read');
      const listed = await call({ method: 'GET', url: '/v1/pets' });
      assert.equal(listed.json().length, 1, 'the refused create stored nothing');
    },
  );

  test(
    `${kind.name}: out of scope comes before validation and size: a bad or oversized create is 403`,
    { skip: kind.skip },
    async (t) => {
      const { keyWith } = await appWithKeys(t, kind);
      const reader = await keyWith('pets:read', 'metrics:read');
      const json = { 'content-type': 'application/json' };
      for (const options of [
        { payload: '{"name":', headers: json },
        { payload: { name: 'Rex', categoryId: 7, id: 3 } },
        { payload: 'x'.repeat(20_000), headers: json },
        { payload: 'name=Rex', headers: { 'content-type': 'application/x-www-form-urlencoded' } },
        { headers: { 'idempotency-key': '' } },
      ] as InjectOptions[]) {
        assertForbidden(await reader({ ...options, method: 'POST', url: '/v1/pets' }), 'pets:write');
      }
      const writer = await keyWith('pets:write');
      assertForbidden(await writer({ method: 'GET', url: '/v1/pets?limit=0&bogus=1' }), 'pets:read');
      assertForbidden(await writer({ method: 'GET', url: '/v1/pets/abc' }), 'pets:read');
    },
  );

  test(
    `${kind.name}: a metrics:read key scrapes /metrics but cannot list, get or create`,
    { skip: kind.skip },
    async (t) => {
      const { keyWith } = await appWithKeys(t, kind);
      const scraper = await keyWith('metrics:read');
      const scraped = await scraper({ method: 'GET', url: '/metrics' });
      assert.equal(scraped.statusCode, 200);
      assert.match(scraped.body, /petstore_http_requests_total/);
      assertForbidden(await scraper({ method: 'GET', url: '/v1/pets' }), 'pets:read');
      assertForbidden(await scraper({ method: 'GET', url: '/v1/pets/1' }), 'pets:read');
      assertForbidden(await scraper({ method: 'POST', url: '/v1/pets', payload: pet }), 'pets:write');
      // HEAD follows GET: the same status and challenge, no body.
      const head = await scraper({ method: 'HEAD', url: '/v1/pets' });
      assert.equal(head.statusCode, 403);
      assert.equal(head.headers['www-authenticate'], challenge('pets:read'));
      assert.equal(head.body, '');
    },
  );

  test(`${kind.name}: a pets:write key creates but cannot list`, { skip: kind.skip }, async (t) => {
    const { keyWith } = await appWithKeys(t, kind);
    const writer = await keyWith('pets:write');
    assert.equal((await writer({ method: 'POST', url: '/v1/pets', payload: pet })).statusCode, 201);
    assertForbidden(await writer({ method: 'GET', url: '/v1/pets' }), 'pets:read');
  });

  test(
    `${kind.name}: a key issued before scopes existed holds all three after the migration`,
    { skip: kind.skip },
    async (t) => {
      const database = await kind.createDatabase(t);
      const read = (dialect: string, name: string) =>
        readFileSync(new URL(`../migrations/${dialect}/${name}.sql`, import.meta.url), 'utf8');
      const dialect = kind.name === 'SQLite' ? 'sqlite' : 'postgres';
      const key = makeKey();
      const hash = hashKey(key).toString('hex');
      const bytes = dialect === 'sqlite' ? `X'${hash}'` : `'\\x${hash}'::bytea`;
      // The database as the release before scopes left it: migrations 001 and 002 and one key.
      await database.execute(
        [
          'CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)',
          read(dialect, '001_pets_and_keys'),
          read(dialect, '002_idempotency_keys'),
          "INSERT INTO schema_migrations VALUES (1, '001_pets_and_keys', '2026-01-01T00:00:00Z')",
          "INSERT INTO schema_migrations VALUES (2, '002_idempotency_keys', '2026-01-01T00:00:00Z')",
          `INSERT INTO api_keys (name, hint, hash, created_at) VALUES ('old', 'psk_old', ${bytes}, '2026-01-01T00:00:00Z')`,
        ].join(';\n'),
      );
      const store = database.open();
      assert.equal((await store.migrate())[0], '003_key_scopes_and_expiry');
      const [old] = await store.listKeys();
      assert.deepEqual(old!.scopes, ['pets:read', 'pets:write', 'metrics:read']);
      const { app } = await startApp(t, { store });
      const call = (options: InjectOptions) =>
        app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
      assert.equal((await call({ method: 'GET', url: '/metrics' })).statusCode, 200);
      assert.equal((await call({ method: 'POST', url: '/v1/pets', payload: pet })).statusCode, 201);
      assert.equal((await call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
    },
  );
}

test('a cached page of animals is never sent for a key without pets:read', async (t) => {
  const { app, call, store } = await startApp(t);
  for (const name of ['Rex', 'Tom', 'Kit']) await addPet({ call }, { name, categoryId: 1 });
  const { key: reader } = await issueKey(store, 'reader', new Date(), { scopes: ['pets:read'] });
  const { key: scraper } = await issueKey(store, 'scraper', new Date(), { scopes: ['metrics:read'] });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  const get = (path: string, key: string) => fetch(base + path, { headers: { authorization: `Bearer ${key}` } });
  // Asked twice, the first page is kept and answered in front of Fastify (page-cache.ts).
  for (let i = 0; i < 3; i++) assert.equal((await get('/v1/pets?limit=1', reader)).status, 200);
  // The scraper's key is remembered (just used) when it asks for the kept page.
  assert.equal((await get('/metrics', scraper)).status, 200);
  const refused = await get('/v1/pets?limit=1', scraper);
  assert.equal(refused.status, 403);
  assert.equal(refused.headers.get('www-authenticate'), challenge('pets:read'));
  assert.equal(((await refused.json()) as { code: string }).code, 'forbidden');
});
