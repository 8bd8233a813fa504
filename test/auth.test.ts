import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import type { InjectOptions } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { addPet, assertError, startApp, tempSqliteStore } from './helpers.js';
import { exchange, parseResponse } from './raw.js';

const CHALLENGE = 'Bearer realm="petstore"';
const INVALID_TOKEN = 'Bearer realm="petstore", error="invalid_token"';

const operations: InjectOptions[] = [
  { method: 'GET', url: '/v1/pets' },
  { method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 7 } },
  { method: 'GET', url: '/v1/pets/1' },
];

function assertRefused(response: Awaited<ReturnType<Awaited<ReturnType<typeof startApp>>['call']>>, challenge: string) {
  assertError(response, 401, 'unauthorized');
  assert.equal(response.headers['www-authenticate'], challenge);
}

test('returns 401 with a Bearer challenge on every operation when no Authorization header is sent', async (t) => {
  const { app, call } = await startApp(t);
  await addPet({ call });
  for (const operation of operations) {
    assertRefused(await app.inject(operation), CHALLENGE);
  }
});

test('returns 401 when the Authorization header is empty', async (t) => {
  const { app } = await startApp(t);
  for (const operation of operations) {
    assertRefused(await app.inject({ ...operation, headers: { authorization: '' } }), CHALLENGE);
  }
});

test('returns 401 when the scheme is Basic', async (t) => {
  const { app, key } = await startApp(t);
  const basic = `Basic ${Buffer.from(`user:${key}`).toString('base64')}`;
  for (const operation of operations) {
    assertRefused(await app.inject({ ...operation, headers: { authorization: basic } }), CHALLENGE);
  }
});

test('returns 401 when the key is sent with another scheme or none', async (t) => {
  const { app, key } = await startApp(t);
  for (const authorization of [key, `Token ${key}`, `Bearerx ${key}`, `ApiKey ${key}`]) {
    assertRefused(await app.inject({ method: 'GET', url: '/v1/pets', headers: { authorization } }), CHALLENGE);
  }
});

test('returns 401 without error="invalid_token" when the bearer token is empty', async (t) => {
  const { app } = await startApp(t);
  for (const authorization of ['Bearer', 'Bearer ', 'bearer    ']) {
    for (const operation of operations) {
      assertRefused(await app.inject({ ...operation, headers: { authorization } }), CHALLENGE);
    }
  }
});

test('returns 401 with error="invalid_token" when the key is unknown', async (t) => {
  const { app, key } = await startApp(t);
  const unknown = key.slice(0, -1) + (key.endsWith('A') ? 'B' : 'A');
  for (const token of [unknown, 'psk_unknown', 'not-a-key', 'psk_$%^', `${key}x`]) {
    for (const operation of operations) {
      assertRefused(await app.inject({ ...operation, headers: { authorization: `Bearer ${token}` } }), INVALID_TOKEN);
    }
  }
});

test('returns 401 with error="invalid_token" when the key was revoked', async (t) => {
  const { app, store } = await startApp(t);
  const { key, record } = await issueKey(store, 'soon revoked');
  const headers = { authorization: `Bearer ${key}` };
  assert.equal((await app.inject({ method: 'GET', url: '/v1/pets', headers })).statusCode, 200);
  assert.equal(await store.revokeKey(record.id, new Date()), true);
  for (const operation of operations) {
    assertRefused(await app.inject({ ...operation, headers }), INVALID_TOKEN);
  }
});

test('a key revoked through one instance is refused by another sharing the database', async (t) => {
  const { path } = await tempSqliteStore(t);
  const first = openSqliteStore(path);
  const second = openSqliteStore(path);
  t.after(() => first.close());
  t.after(() => second.close());
  await first.migrate();
  await second.migrate();
  const one = await startApp(t, { store: first });
  const other = await startApp(t, { store: second });
  const { key, record } = await issueKey(first, 'shared');
  const headers = { authorization: `Bearer ${key}` };
  assert.equal((await other.app.inject({ method: 'GET', url: '/v1/pets', headers })).statusCode, 200);
  assert.equal(await one.store.revokeKey(record.id, new Date()), true);
  // Within one second by the contract: the other store may remember the key for less than that.
  const revokedAt = Date.now();
  for (const app of [one, other]) app.clock.set(app.clock.now() + 1000);
  assertRefused(await one.app.inject({ method: 'GET', url: '/v1/pets', headers }), INVALID_TOKEN);
  let response = await other.app.inject({ method: 'GET', url: '/v1/pets', headers });
  while (response.statusCode === 200 && Date.now() - revokedAt < 1000) {
    await sleep(50);
    response = await other.app.inject({ method: 'GET', url: '/v1/pets', headers });
  }
  assert.ok(Date.now() - revokedAt <= 1000, 'refused within one second');
  assertRefused(response, INVALID_TOKEN);
});

test('refusing a revoked key leaves the other keys working', async (t) => {
  const { store, call } = await startApp(t);
  const { record } = await issueKey(store, 'other');
  await store.revokeKey(record.id, new Date());
  assert.equal((await call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
});

test('accepts the Bearer scheme name in any case', async (t) => {
  const { app, key, call } = await startApp(t);
  await addPet({ call });
  for (const scheme of ['Bearer', 'bearer', 'BEARER', 'bEaReR']) {
    for (const operation of operations) {
      const response = await app.inject({ ...operation, headers: { authorization: `${scheme} ${key}` } });
      assert.ok([200, 201].includes(response.statusCode), `${scheme}: ${response.statusCode} ${response.body}`);
    }
  }
});

test('issues keys as psk_ followed by URL-safe characters, each different', async (t) => {
  const { store } = await tempSqliteStore(t);
  const keys = new Set<string>();
  for (let i = 0; i < 20; i++) {
    const { key } = await issueKey(store, `key ${i}`);
    assert.match(key, /^psk_[A-Za-z0-9_-]{43,}$/);
    keys.add(key);
  }
  assert.equal(keys.size, 20);
});

test('stores no key in the database file, only what cannot give it back', async (t) => {
  const { store, path } = await tempSqliteStore(t);
  const { key } = await issueKey(store, 'secret');
  const listed = JSON.stringify(await store.listKeys());
  assert.ok(!listed.includes(key));
  await store.close();
  for (const file of [path, `${path}-wal`]) {
    let bytes: Buffer;
    try {
      bytes = readFileSync(file);
    } catch {
      continue;
    }
    assert.equal(bytes.includes(key), false, `${file} holds the key`);
    assert.equal(bytes.includes(key.slice(4)), false, `${file} holds the key's random part`);
  }
});

test('one connection that changes its key between requests is judged by each key it sends', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: '100' } });
  const { key: other } = await issueKey(app.store, 'other');
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as { port: number };
  const request = (authorization: string) =>
    `GET /v1/pets?limit=1 HTTP/1.1\r\nHost: petstore\r\nAuthorization: ${authorization}\r\n\r\n`;
  // One connection, its requests pipelined: the server answers them in order.
  const raw = await exchange(
    port,
    [
      request(`Bearer ${app.key}`),
      request(`Bearer ${app.key.slice(0, -1)}${app.key.endsWith('A') ? 'B' : 'A'}`),
      request(`Bearer ${app.key}`),
      request(`Bearer ${other}`),
      request(`bearer ${app.key}`),
      request('Basic dXNlcjpwYXNz'),
      request(`Bearer ${other}`),
    ].join(''),
  );
  const answers = raw.split(/(?=HTTP\/1\.1 )/).map((text) => parseResponse(text));
  assert.deepEqual(
    answers.map((answer) => answer.statusLine),
    ['200 OK', '401 Unauthorized', '200 OK', '200 OK', '200 OK', '401 Unauthorized', '200 OK'].map(
      (s) => `HTTP/1.1 ${s}`,
    ),
  );
  // Each key counted on its own (pipelined requests may be counted in any order on PostgreSQL).
  const remaining = (indexes: number[]) =>
    indexes.map((i) => /r=([0-9]+);/.exec(answers[i]!.headers.get('ratelimit') ?? '')?.[1]).sort();
  assert.deepEqual(remaining([0, 2, 4]), ['97', '98', '99']);
  assert.deepEqual(remaining([3, 6]), ['98', '99']);
  // The refused key counts against the address; the Basic credentials after it do not.
  assert.equal(answers[1]!.headers.get('ratelimit'), '"refused-keys";r=59;t=60');
  assert.equal(answers[5]!.headers.get('ratelimit'), '"refused-keys";r=59;t=60');
  assert.equal(answers[1]!.headers.get('www-authenticate'), INVALID_TOKEN);
  assert.equal(answers[5]!.headers.get('www-authenticate'), CHALLENGE);
});
