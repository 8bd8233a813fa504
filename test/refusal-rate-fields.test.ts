import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { CountMinSketch } from '../src/http/sketch.js';
import { issueKey } from '../src/keys/issue.js';
import { assertError, startApp, tempSqliteStore } from './helpers.js';
import { exchange, parseResponse } from './raw.js';

// docs/api.md#rate-limits: answers given before a valid key was read carry the "refused-keys" fields
// of the client address; a refused key counts against it, a request without credentials does not.
const REFUSED_POLICY = '"refused-keys";q=60;w=60';
const BAD_KEY = { authorization: `Bearer psk_${'A'.repeat(43)}` };
const PET = { name: 'Rex', categoryId: 7 };

/** The fields of an answer, by lower-case name, from inject or from a raw answer. */
type Fields = Pick<Map<string, string>, 'get'>;
const fieldsOf = (response: LightMyRequestResponse): Fields => ({
  get: (name) => {
    const value = response.headers[name];
    return value === undefined ? undefined : String(value);
  },
});

/** Asserts the "refused-keys" fields with `left` refused keys left and `seconds` in the window. */
function assertRefusedFields(fields: Fields, left: number, seconds = 60) {
  assert.equal(fields.get('ratelimit-policy'), REFUSED_POLICY);
  assert.equal(fields.get('ratelimit'), `"refused-keys";r=${left};t=${seconds}`);
}

function assertNoRateFields(fields: Fields, what: string) {
  assert.equal(fields.get('ratelimit'), undefined, what);
  assert.equal(fields.get('ratelimit-policy'), undefined, what);
}

/** The app on a loopback socket (SQLite: these answers come before any store work). */
async function listen(t: TestContext, env: Record<string, string> = {}) {
  const app = await startApp(t, { env, store: (await tempSqliteStore(t)).store });
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  return { ...app, port };
}

/** What the server sends on a connection that sends `text` and waits, until it closes it. */
function sendAndWait(port: number, text: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error('the server did not close the connection within 10 s'));
    }, 10_000);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.write(text);
  });
}

/** Raw requests refused before any key is read: 414 (guardRequests), 431 and 400 (the HTTP parser), 400 (framing). */
const earlyRefusals = [
  { status: 414, request: `GET /v1/pets?status=${'a'.repeat(8 * 1024)} HTTP/1.1\r\nHost: x\r\n\r\n` },
  { status: 431, request: `GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(17 * 1024)}\r\n\r\n` },
  { status: 400, request: 'GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n' },
  { status: 400, request: 'GET /v1/pets/1 HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n' },
];

test('the sketch reads a count without adding to it', () => {
  const sketch = new CountMinSketch();
  assert.equal(sketch.peek('192.0.2.7'), 0);
  sketch.add('192.0.2.7');
  sketch.add('192.0.2.7');
  for (let i = 0; i < 3; i++) assert.equal(sketch.peek('192.0.2.7'), 2);
  assert.equal(sketch.add('192.0.2.7'), 3);
  assert.equal(sketch.peek('192.0.2.8'), 0);
});

test('a 401 for a refused key carries the address’s refused-keys fields, one fewer left each time', async (t) => {
  const { app, clock } = await startApp(t);
  for (const left of [59, 58, 57]) {
    const refused = await app.inject({ url: '/v1/pets', headers: BAD_KEY });
    assertError(refused, 401, 'unauthorized');
    assertRefusedFields(fieldsOf(refused), left);
  }
  const create = await app.inject({ method: 'POST', url: '/v1/pets', headers: BAD_KEY, payload: PET });
  assertError(create, 401, 'unauthorized');
  assertRefusedFields(fieldsOf(create), 56);
  clock.set(clock.now() + 20_500);
  assertRefusedFields(fieldsOf(await app.inject({ url: '/v1/pets/1', headers: BAD_KEY })), 55, 40);
  clock.set(clock.now() + 40_000);
  assertRefusedFields(fieldsOf(await app.inject({ url: '/v1/pets', headers: BAD_KEY })), 59, 60);
});

test('a 401 without usable credentials shows the refused keys left to the address without counting', async (t) => {
  const { app } = await startApp(t);
  const noKey = [{}, { authorization: '' }, { authorization: 'Basic dXNlcjpwYXNz' }, { authorization: 'Bearer ' }];
  for (const headers of noKey) {
    const refused = await app.inject({ url: '/v1/pets', headers });
    assertError(refused, 401, 'unauthorized');
    assertRefusedFields(fieldsOf(refused), 60);
  }
  assertRefusedFields(fieldsOf(await app.inject({ url: '/v1/pets', headers: BAD_KEY })), 59);
  for (const headers of [...noKey, ...noKey]) {
    assertRefusedFields(fieldsOf(await app.inject({ url: '/v1/pets', headers })), 59);
  }
  assertRefusedFields(fieldsOf(await app.inject({ url: '/v1/pets', headers: BAD_KEY })), 58);
});

test('a 401 on /metrics carries the refused-keys fields too', async (t) => {
  const { app } = await startApp(t);
  const refused = await app.inject({ url: '/metrics', headers: BAD_KEY });
  assertError(refused, 401, 'unauthorized');
  assertRefusedFields(fieldsOf(refused), 59);
  assertRefusedFields(fieldsOf(await app.inject({ url: '/metrics' })), 59);
});

test('a 403 carries the key’s default fields and counts against its limit', async (t) => {
  const app = await startApp(t);
  const { key } = await issueKey(app.store, 'reader', new Date(), { scopes: ['pets:read'] });
  const reader = { authorization: `Bearer ${key}` };
  const refused = await app.app.inject({ method: 'POST', url: '/v1/pets', headers: reader, payload: PET });
  assertError(refused, 403, 'forbidden', 'pets:write');
  assert.equal(refused.headers['ratelimit-policy'], '"default";q=6000;w=60');
  assert.equal(refused.headers.ratelimit, '"default";r=5999;t=60');
  const again = await app.app.inject({ method: 'POST', url: '/v1/pets', headers: reader, payload: PET });
  assert.equal(again.headers.ratelimit, '"default";r=5998;t=60');
  const served = await app.app.inject({ url: '/v1/pets', headers: reader });
  assert.equal(served.statusCode, 200);
  assert.equal(served.headers.ratelimit, '"default";r=5997;t=60');
});

test('a key past its limit gets 429 before its scope is checked', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: '2' } });
  const { key } = await issueKey(app.store, 'reader', new Date(), { scopes: ['pets:read'] });
  const reader = { authorization: `Bearer ${key}` };
  for (let i = 0; i < 2; i++)
    assert.equal((await app.app.inject({ url: '/v1/pets', headers: reader })).statusCode, 200);
  const limited = await app.app.inject({ method: 'POST', url: '/v1/pets', headers: reader, payload: PET });
  assertError(limited, 429, 'rate_limited');
  assert.equal(limited.headers['ratelimit-policy'], '"default";q=2;w=60');
  assert.equal(limited.headers['retry-after'], '60');
});

test('a 414, 431 or 400 refused before any key is read carries the address’s refused-keys fields, uncounted', async (t) => {
  const app = await listen(t);
  // Made through inject, from 127.0.0.1 as the raw requests are.
  assertRefusedFields(fieldsOf(await app.app.inject({ url: '/v1/pets', headers: BAD_KEY })), 59);
  for (const { status, request } of earlyRefusals) {
    for (const auth of ['', `Authorization: Bearer ${app.key}\r\n`]) {
      const answer = parseResponse(await exchange(app.port, request.replace('\r\n', `\r\n${auth}`)));
      assert.match(answer.statusLine, new RegExp(`^HTTP/1.1 ${status} `));
      assertRefusedFields(answer.headers, 59);
    }
  }
  assertRefusedFields(fieldsOf(await app.app.inject({ url: '/v1/pets', headers: BAD_KEY })), 58);
});

test('a 408 for headers that did not arrive in time carries the address’s refused-keys fields', async (t) => {
  const app = await listen(t, { PETSTORE_HEADERS_TIMEOUT_MS: '300', PETSTORE_REQUEST_TIMEOUT_MS: '600' });
  const answer = parseResponse(await sendAndWait(app.port, 'GET /v1/pets HTTP/1.1\r\nHost: x\r\n'));
  assert.equal(answer.statusLine, 'HTTP/1.1 408 Request Timeout');
  assert.equal(answer.headers.get('ratelimit-policy'), REFUSED_POLICY);
  assert.match(answer.headers.get('ratelimit') ?? '', /^"refused-keys";r=60;t=[1-9][0-9]*$/);
});

test('an IPv6 client behind a trusted proxy sees the refused keys of its whole /64', async (t) => {
  const { app } = await startApp(t, { env: { PETSTORE_TRUST_PROXY: '127.0.0.1' } });
  const from = (address: string, headers: Record<string, string> = {}) =>
    app.inject({ url: '/v1/pets', headers: { 'x-forwarded-for': address, ...headers } });
  assertRefusedFields(fieldsOf(await from('2001:db8:1:2::1', BAD_KEY)), 59);
  assertRefusedFields(fieldsOf(await from('2001:db8:1:2:ffff::7')), 59);
  assertRefusedFields(fieldsOf(await from('2001:db8:1:3::1')), 60);
  assertRefusedFields(fieldsOf(await from('192.0.2.7')), 60);
});

test('with PETSTORE_AUTH_FAILURE_LIMIT=off no answer carries refused-keys fields', async (t) => {
  const app = await listen(t, { PETSTORE_AUTH_FAILURE_LIMIT: 'off' });
  for (const headers of [BAD_KEY, {}, { authorization: 'Basic dXNlcjpwYXNz' }]) {
    const refused = await app.app.inject({ url: '/v1/pets', headers });
    assertError(refused, 401, 'unauthorized');
    assertNoRateFields(fieldsOf(refused), JSON.stringify(headers));
  }
  for (const { status, request } of earlyRefusals) {
    const answer = parseResponse(await exchange(app.port, request));
    assert.match(answer.statusLine, new RegExp(`^HTTP/1.1 ${status} `));
    assertNoRateFields(answer.headers, request.slice(0, 40));
  }
  // The key's own limit is still on: a 403 carries its fields.
  const { key } = await issueKey(app.store, 'reader', new Date(), { scopes: ['pets:read'] });
  const forbidden = await app.app.inject({
    method: 'POST',
    url: '/v1/pets',
    headers: { authorization: `Bearer ${key}` },
    payload: PET,
  });
  assertError(forbidden, 403, 'forbidden');
  assert.equal(forbidden.headers['ratelimit-policy'], '"default";q=6000;w=60');
});
