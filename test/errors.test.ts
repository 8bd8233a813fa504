import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import type { Store } from '../src/store/store.js';
import { assertError, postRaw, startApp, tempSqliteStore } from './helpers.js';

const PET = '{"name":"Rex","categoryId":7}';

test('returns 404 not_found with exactly code, message and status for an unknown path, without a key', async (t) => {
  const { app, call } = await startApp(t);
  const paths = [
    '/',
    '/nope',
    '/v1',
    '/v1/',
    '/v1/pet',
    '/V1/PETS',
    '/v2/pets',
    '/v1/pets/1/extra',
    '/v1/pets//1',
    '/pets',
  ];
  for (const url of paths) {
    for (const send of [app.inject.bind(app), call]) {
      const response = await send({ method: 'GET', url });
      assertError(response, 404, 'not_found');
      assert.deepEqual(Object.keys(JSON.parse(response.body)), ['code', 'message', 'status']);
    }
  }
});

test('returns 404 for an unknown path whatever the method, body or key', async (t) => {
  const { app } = await startApp(t);
  const requests: InjectOptions[] = [
    { method: 'POST', url: '/v1/animals', headers: { 'content-type': 'application/json' }, payload: PET },
    { method: 'POST', url: '/v1/animals', headers: { 'content-type': 'text/plain' }, payload: 'x'.repeat(20_000) },
    { method: 'DELETE', url: '/nope', headers: { authorization: 'Bearer psk_wrong' } },
    { method: 'PUT', url: '/%zz' },
    { method: 'GET', url: '/v1/pe%zz' },
  ];
  for (const request of requests) assertError(await app.inject(request), 404, 'not_found');
});

test('returns 405 with Allow for a method a path does not serve, without a key', async (t) => {
  const { app } = await startApp(t);
  const cases: [string, string[], string[]][] = [
    ['/v1/pets', ['DELETE', 'PUT', 'PATCH', 'OPTIONS', 'TRACE'], ['GET', 'HEAD', 'POST']],
    ['/v1/pets/1', ['DELETE', 'PUT', 'PATCH', 'POST', 'OPTIONS'], ['GET', 'HEAD']],
    ['/v1/pets/abc', ['DELETE', 'POST'], ['GET', 'HEAD']],
    ['/v1/pets', ['PROPFIND', 'LINK', 'MKCOL'], ['GET', 'HEAD', 'POST']],
    ['/v1/openapi.json', ['POST', 'DELETE'], ['GET', 'HEAD']],
    ['/healthz', ['POST', 'PUT'], ['GET', 'HEAD']],
    ['/readyz', ['POST', 'PATCH'], ['GET', 'HEAD']],
  ];
  for (const [url, methods, allowed] of cases) {
    for (const method of methods) {
      const response = await app.inject({ method: method as InjectOptions['method'], url });
      assertError(response, 405, 'method_not_allowed');
      const allow = String(response.headers.allow)
        .split(',')
        .map((m) => m.trim())
        .sort();
      assert.deepEqual(allow, allowed, `${method} ${url}`);
    }
  }
});

test('returns 405 before reading or checking the body', async (t) => {
  const { app } = await startApp(t);
  const bodies: InjectOptions[] = [
    { headers: { 'content-type': 'application/json' }, payload: '{' },
    { headers: { 'content-type': 'application/json' }, payload: 'x'.repeat(100_000) },
    { headers: { 'content-type': 'text/plain' }, payload: PET },
    { payload: PET },
  ];
  for (const body of bodies) {
    for (const [method, url] of [
      ['PUT', '/v1/pets'],
      ['PATCH', '/v1/pets/1'],
      ['DELETE', '/v1/pets/1'],
    ] as const) {
      const response = await app.inject({ method, url, ...body });
      assertError(response, 405, 'method_not_allowed');
    }
  }
});

test('returns 405 with a bad key too: wrong methods are answered without authentication', async (t) => {
  const { app } = await startApp(t);
  const response = await app.inject({ method: 'DELETE', url: '/v1/pets/1', headers: { authorization: 'Basic x' } });
  assertError(response, 405, 'method_not_allowed');
});

test('answers HEAD wherever GET is, with the same status and headers and no body', async (t) => {
  const app = await startApp(t);
  await postRaw(app, PET);
  await postRaw(app, PET);
  const urls = [
    '/v1/pets',
    '/v1/pets?limit=1',
    '/v1/pets?status=sold',
    '/v1/pets?limit=0',
    '/v1/pets?limt=1',
    '/v1/pets/1',
    '/v1/pets/999',
    '/v1/pets/abc',
    '/v1/openapi.json',
    '/healthz',
    '/readyz',
  ];
  for (const url of urls) {
    const get = await app.call({ method: 'GET', url });
    const head = await app.call({ method: 'HEAD', url });
    assert.equal(head.statusCode, get.statusCode, url);
    assert.equal(head.body, '', url);
    // The one difference: each request counts against the key's rate limit. (With read replicas,
    // /readyz shows each one's lag as measured when asked: the two bodies may differ in length.)
    const varying = url === '/readyz' && app.store.replication !== undefined ? ['content-length'] : [];
    assert.equal(get.headers.ratelimit === undefined, head.headers.ratelimit === undefined, url);
    assert.deepEqual(withoutDate(head, 'ratelimit', ...varying), withoutDate(get, 'ratelimit', ...varying), url);
  }
});

test('answers HEAD on getPet after the sunset with 410 like GET', async (t) => {
  const app = await startApp(t);
  app.clock.set(Date.UTC(2030, 11, 5));
  const get = await app.call({ method: 'GET', url: '/v1/pets/1' });
  const head = await app.call({ method: 'HEAD', url: '/v1/pets/1' });
  assertError(get, 410, 'gone');
  assert.equal(head.statusCode, 410);
  assert.equal(head.body, '');
  assert.deepEqual(withoutDate(head, 'ratelimit'), withoutDate(get, 'ratelimit'));
});

test('HEAD on an operation needs the key like GET', async (t) => {
  const { app, key } = await startApp(t);
  for (const url of ['/v1/pets', '/v1/pets/1']) {
    for (const authorization of [undefined, 'Basic abc', 'Bearer psk_wrong']) {
      const headers = authorization === undefined ? {} : { authorization };
      const get = await app.inject({ method: 'GET', url, headers });
      const head = await app.inject({ method: 'HEAD', url, headers });
      assert.equal(get.statusCode, 401);
      assert.equal(head.statusCode, 401);
      assert.equal(head.body, '');
      assert.deepEqual(withoutDate(head, 'ratelimit'), withoutDate(get, 'ratelimit'));
    }
  }
  const ok = await app.inject({ method: 'HEAD', url: '/v1/pets', headers: { authorization: `Bearer ${key}` } });
  assert.equal(ok.statusCode, 200);
});

test('answers HEAD on an unknown path with 404 and no body', async (t) => {
  const { app } = await startApp(t);
  const get = await app.inject({ method: 'GET', url: '/nope' });
  const head = await app.inject({ method: 'HEAD', url: '/nope' });
  assert.equal(head.statusCode, 404);
  assert.equal(head.body, '');
  assert.deepEqual(withoutDate(head, 'ratelimit'), withoutDate(get, 'ratelimit'));
});

test('authentication comes before 400, 413 and 415 on createPet', async (t) => {
  const { app } = await startApp(t);
  const bad: InjectOptions[] = [
    { headers: { 'content-type': 'application/json' }, payload: '{' },
    { headers: { 'content-type': 'application/json' }, payload: '' },
    { headers: { 'content-type': 'application/json' }, payload: '{"name":"","categoryId":1.5,"id":3}' },
    { headers: { 'content-type': 'application/json' }, payload: Buffer.from([0xff, 0xfe]) },
    { headers: { 'content-type': 'application/json' }, payload: `{"name":"${'a'.repeat(100_000)}","categoryId":7}` },
    { headers: { 'content-type': 'text/plain' }, payload: PET },
    { headers: { 'content-type': 'application/json; charset=latin1' }, payload: PET },
    {},
  ];
  for (const authorization of [undefined, 'Basic abc', 'Bearer ', 'Bearer psk_wrong']) {
    for (const request of bad) {
      const headers = { ...request.headers, ...(authorization !== undefined && { authorization }) };
      const response = await app.inject({ method: 'POST', url: '/v1/pets', ...request, headers });
      assertError(response, 401, 'unauthorized');
    }
  }
});

test('authentication comes before 400 and 404 on listPets and getPet', async (t) => {
  const { app } = await startApp(t);
  for (const url of [
    '/v1/pets?limit=0',
    '/v1/pets?limt=5',
    '/v1/pets?status=lost',
    '/v1/pets?cursor=zzz',
    '/v1/pets?limit=1&limit=2',
    '/v1/pets/abc',
    '/v1/pets/999',
    '/v1/pets/0',
  ]) {
    assertError(await app.inject({ method: 'GET', url }), 401, 'unauthorized');
    assertError(
      await app.inject({ method: 'GET', url, headers: { authorization: 'Bearer psk_wrong' } }),
      401,
      'unauthorized',
    );
  }
});

/** A store whose pet operations fail the way a broken database does. */
function failingStore(store: Store): Store {
  const fail = async () => {
    throw new Error('SQLITE_CORRUPT: database disk image is malformed at /var/lib/petstore/petstore.db');
  };
  return { ...store, createPet: fail, getPet: fail, listPets: fail };
}

test('returns 500 internal_error with no SQL, stack or file path when the store fails', async (t) => {
  const { store } = await tempSqliteStore(t);
  const app = await startApp(t, { store: failingStore(store) });
  const responses = [
    await app.call({ method: 'GET', url: '/v1/pets' }),
    await app.call({ method: 'GET', url: '/v1/pets/1' }),
    await postRaw(app, PET),
  ];
  for (const response of responses) {
    const message = assertError(response, 500, 'internal_error');
    for (const leak of ['SQLITE', 'malformed', '/var/', 'petstore.db', ' at ', '.ts:', '.js:']) {
      assert.ok(!response.body.includes(leak), `leaks ${leak}: ${message}`);
    }
  }
});

test('every error message is one sentence with no stack, SQL or path', async (t) => {
  const app = await startApp(t);
  const inject = (options: InjectOptions) => app.app.inject(options);
  const responses = [
    await inject({ method: 'GET', url: '/v1/pets' }),
    await inject({ method: 'GET', url: '/nope' }),
    await inject({ method: 'DELETE', url: '/v1/pets' }),
    await app.call({ method: 'GET', url: '/v1/pets?limit=0' }),
    await app.call({ method: 'GET', url: '/v1/pets/0' }),
    await postRaw(app, '{'),
    await postRaw(app, '{"name":"Rex","categoryId":7,"id":1}'),
    await postRaw(app, PET, { 'content-type': 'text/plain' }),
    await postRaw(app, 'x'.repeat(20_000)),
  ];
  for (const response of responses) {
    const { message } = JSON.parse(response.body) as { message: string };
    assert.match(message, /^\S[^\n]*\.$/, message);
    assert.doesNotMatch(message, /\.\s+[A-Z]/, `more than one sentence: ${message}`);
    assert.ok(!/\n|\bat .*:\d+|SELECT|INSERT|\/src\/|node_modules/.test(message), message);
  }
});

test('healthz and readyz answer without a key', async (t) => {
  const { app, store } = await startApp(t);
  const healthz = await app.inject({ method: 'GET', url: '/healthz' });
  assert.equal(healthz.statusCode, 200);
  assert.equal(healthz.body, '{"status":"ok"}');
  const readyz = await app.inject({ method: 'GET', url: '/readyz' });
  assert.equal(readyz.statusCode, 200);
  // With read replicas (test/replica-suite.test.ts), it says how each is used besides.
  if (store.replication) assert.equal(readyz.json().status, 'ready');
  else assert.equal(readyz.body, '{"status":"ready"}');
});

test('readyz answers 503 unavailable with the Error body when the database does not answer', async (t) => {
  const { store } = await tempSqliteStore(t);
  const broken: Store = {
    ...store,
    ping: async () => {
      throw new Error('connect ECONNREFUSED 10.0.0.5:5432');
    },
  };
  const { app } = await startApp(t, { store: broken });
  const response = await app.inject({ method: 'GET', url: '/readyz' });
  assertError(response, 503, 'unavailable');
  assert.ok(!response.body.includes('ECONNREFUSED'));
  assert.equal((await app.inject({ method: 'GET', url: '/healthz' })).statusCode, 200);
});

// Date and X-Request-Id differ from one response to the next by design.
function withoutDate(response: LightMyRequestResponse, ...others: string[]) {
  const { date: _date, 'x-request-id': _id, ...headers } = response.headers;
  for (const name of others) delete headers[name];
  return headers;
}
