import assert from 'node:assert/strict';
import { connect, type AddressInfo } from 'node:net';
import { PassThrough } from 'node:stream';
import { test, type TestContext } from 'node:test';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import type { Store } from '../src/store/store.js';
import { startApp, tempSqliteStore } from './helpers.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, startServer } from './process.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The whole service with its default logger writing into memory at LOG_LEVEL (info by default). */
async function loggedApp(t: TestContext, { level = 'info', store }: { level?: string; store?: Store } = {}) {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (chunk) => (text += chunk));
  const used = store ?? (await tempSqliteStore(t)).store;
  const app = await buildApp({ config: loadConfig({ LOG_LEVEL: level }), store: used, logStream: stream });
  t.after(() => app.close());
  const { key } = await issueKey(used, 'test');
  const lines = () =>
    text
      .split('\n')
      .filter((line) => line !== '')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
  return { app, key, text: () => text, lines };
}

test('logs one JSON line per request with reqId, operation, method, path, status and durationMs', async (t) => {
  const { app, key, lines } = await loggedApp(t);
  const response = await app.inject({
    method: 'GET',
    url: '/v1/pets?limit=5&status=sold',
    headers: { authorization: `Bearer ${key}` },
  });
  assert.equal(response.statusCode, 200);
  const reqId = response.headers['x-request-id'];
  assert.match(String(reqId), UUID);
  const mine = lines().filter((line) => line.reqId === reqId);
  assert.equal(mine.length, 1, JSON.stringify(lines()));
  const line = mine[0]!;
  assert.equal(line.level, 30);
  assert.equal(line.msg, 'request completed');
  assert.equal(line.operation, 'listPets');
  assert.equal(line.method, 'GET');
  assert.equal(line.path, '/v1/pets');
  assert.equal(line.status, 200);
  assert.equal(typeof line.durationMs, 'number');
  assert.ok((line.durationMs as number) >= 0 && (line.durationMs as number) < 30_000);
  assert.equal(typeof line.time, 'number');
  assert.deepEqual(Object.keys(line).sort(), [
    'durationMs',
    'hostname',
    'level',
    'method',
    'msg',
    'operation',
    'path',
    'pid',
    'reqId',
    'status',
    'time',
  ]);
});

test('keeps a sane X-Request-Id, echoes it, and replaces one that is not', async (t) => {
  const { app, key, lines } = await loggedApp(t);
  const headers = { authorization: `Bearer ${key}` };
  for (const given of ['abc-123', 'trace:0af7651916cd43dd8448eb211c80319c', 'x'.repeat(128)]) {
    const response = await app.inject({
      method: 'GET',
      url: '/v1/pets',
      headers: { ...headers, 'x-request-id': given },
    });
    assert.equal(response.headers['x-request-id'], given);
    assert.equal(lines().filter((line) => line.reqId === given).length, 1);
  }
  for (const given of ['x'.repeat(129), 'has space', 'tab\there', 'ünïcode', '']) {
    const response = await app.inject({
      method: 'GET',
      url: '/v1/pets',
      headers: { ...headers, 'x-request-id': given },
    });
    const echoed = String(response.headers['x-request-id']);
    assert.match(echoed, UUID, `for ${JSON.stringify(given)}`);
    assert.equal(lines().filter((line) => line.reqId === echoed).length, 1);
  }
});

test('errors carry X-Request-Id too, and are logged with their operation and status', async (t) => {
  const { app, lines } = await loggedApp(t);
  const cases = [
    { url: '/v1/pets', operation: 'listPets', status: 401 },
    { url: '/v1/pets/12', operation: 'getPet', status: 401 },
    { url: '/nowhere/secret-looking-path', operation: 'unmatched', status: 404 },
  ];
  for (const { url, operation, status } of cases) {
    const response = await app.inject({ method: 'GET', url });
    assert.equal(response.statusCode, status);
    const line = lines().find((entry) => entry.reqId === response.headers['x-request-id']);
    assert.ok(line, `no line for ${url}`);
    assert.equal(line.operation, operation);
    assert.equal(line.status, status);
  }
});

test('a request the router refuses (malformed percent-encoding) carries X-Request-Id and is logged', async (t) => {
  const { app, lines } = await loggedApp(t);
  const response = await app.inject({
    method: 'GET',
    url: '/v1/pets/%E0%A4%A?secret=1',
    headers: { 'x-request-id': 'bad-url-1' },
  });
  assert.equal(response.statusCode, 404);
  assert.equal(response.json().code, 'not_found');
  assert.equal(response.headers['x-request-id'], 'bad-url-1');
  const mine = lines().filter((line) => line.reqId === 'bad-url-1' && line.msg === 'request completed');
  assert.equal(mine.length, 1, 'one line for the refused request');
  assert.equal(mine[0]!.status, 404);
  assert.equal(mine[0]!.method, 'GET');
  assert.equal(mine[0]!.path, '/v1/pets/%E0%A4%A');
  assert.equal(mine[0]!.operation, 'unmatched');
  assert.equal(typeof mine[0]!.durationMs, 'number');
});

test('never logs a key, the Authorization header, a query string or a body, even when a request fails', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  const store: Store = { ...real, getPet: () => Promise.reject(new Error('disk on fire')) };
  const { app, key, text, lines } = await loggedApp(t, { store });
  const body = { name: 'Secret Name Zq7', categoryId: 9 };
  const responses = [
    await app.inject({ method: 'POST', url: '/v1/pets', payload: body, headers: { authorization: `Bearer ${key}` } }),
    await app.inject({ method: 'GET', url: '/v1/pets/1', headers: { authorization: `Bearer ${key}` } }),
    await app.inject({ method: 'GET', url: `/v1/pets?cursor=${key}`, headers: { authorization: `Bearer ${key}` } }),
    await app.inject({ method: 'GET', url: '/v1/pets', headers: { authorization: `Bearer ${key}x` } }),
    await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${key}` } }),
  ];
  assert.deepEqual(
    responses.map((response) => response.statusCode),
    [201, 500, 400, 401, 200],
  );
  // The 500 is logged with its cause, for the operator, next to its request line.
  assert.ok(lines().some((line) => line.level === 50 && line.msg === 'request failed'));
  assert.equal(lines().filter((line) => line.msg === 'request completed').length, 5);
  const all = text();
  assert.ok(!all.includes(key), 'a key was logged');
  assert.ok(!all.includes(key.slice(4, 20)), 'part of a key was logged');
  assert.ok(!/authorization|bearer/i.test(all), 'the Authorization header was logged');
  assert.ok(!all.includes('Secret Name Zq7'), 'a body was logged');
  assert.ok(!all.includes('cursor'), 'a query string was logged');
});

test('LOG_LEVEL=warn leaves request lines out', async (t) => {
  const { app, key, lines } = await loggedApp(t, { level: 'warn' });
  const response = await app.inject({ method: 'GET', url: '/v1/pets', headers: { authorization: `Bearer ${key}` } });
  assert.equal(response.statusCode, 200);
  assert.ok(response.headers['x-request-id']);
  assert.deepEqual(lines(), []);
});

test('petstore serve writes the request line on standard output', async (t) => {
  const env = childEnv(t);
  // keys create refuses a database that does not exist: migrate makes it, as serve would.
  await migrateDatabase(env);
  const created = await runKeys(['create', '--name', 'logs', '--json'], env);
  assert.equal(created.code, 0, created.stderr);
  const { key } = JSON.parse(created.stdout) as { key: string };
  const server = await startServer(t, env);
  const response = await fetch(`${server.url}/v1/pets?limit=3`, {
    headers: { authorization: `Bearer ${key}`, 'x-request-id': 'from-the-test-42' },
  });
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('x-request-id'), 'from-the-test-42');
  const [line] = await server.waitForOutput(/\{[^\n]*"reqId":"from-the-test-42"[^\n]*\}/);
  const entry = JSON.parse(line) as Record<string, unknown>;
  assert.equal(entry.operation, 'listPets');
  assert.equal(entry.path, '/v1/pets');
  assert.equal(entry.status, 200);
  assert.ok(!line.includes(key));
});

for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  test(`petstore serve writes every request line still waiting when ${signal} ends it`, async (t) => {
    // 200 requests at once from one address: more connections than one address may hold by default.
    const env = { ...childEnv(t), PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: 'off' };
    await migrateDatabase(env);
    const created = await runKeys(['create', '--name', 'logs', '--json'], env);
    const { key } = JSON.parse(created.stdout) as { key: string };
    const server = await startServer(t, env);
    const REQUESTS = 200;
    const responses = await Promise.all(
      Array.from({ length: REQUESTS }, (_, i) =>
        fetch(`${server.url}/v1/pets?limit=3`, {
          headers: { authorization: `Bearer ${key}`, 'x-request-id': `burst-${i}` },
        }),
      ),
    );
    assert.ok(responses.every((response) => response.status === 200));
    server.child.kill(signal);
    assert.deepEqual(await server.exited, { code: 0, signal: null });
    await server.waitForOutput(new RegExp(`(?:"reqId":"burst-[0-9]+"[^]*?){${REQUESTS}}`), 2000);
  });
}

test('with CORS on, browsers may send X-Request-Id and read it back', async (t) => {
  const { app, call } = await startApp(t, { env: { PETSTORE_CORS_ORIGINS: 'https://shop.example' } });
  const preflight = await app.inject({
    method: 'OPTIONS',
    url: '/v1/pets',
    headers: {
      origin: 'https://shop.example',
      'access-control-request-method': 'GET',
      'access-control-request-headers': 'authorization, x-request-id',
    },
  });
  assert.equal(preflight.statusCode, 204);
  assert.match(String(preflight.headers['access-control-allow-headers']), /X-Request-Id/);
  const response = await call({
    method: 'GET',
    url: '/v1/pets',
    headers: { origin: 'https://shop.example', 'x-request-id': 'browser-1' },
  });
  assert.equal(response.headers['x-request-id'], 'browser-1');
  assert.match(String(response.headers['access-control-expose-headers']), /X-Request-Id/);
});

test('a list page answered from the cache is logged with the same fields as any other answer', async (t) => {
  const { app, key, lines } = await loggedApp(t);
  for (let i = 1; i <= 25; i++)
    await app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { authorization: `Bearer ${key}` },
      payload: { name: `Pet ${i}`, categoryId: i },
    });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const response = await fetch(`http://127.0.0.1:${port}/v1/pets?limit=20`, {
      headers: { authorization: `Bearer ${key}`, 'x-request-id': `page-${i}` },
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get('x-request-id'), `page-${i}`);
    ids.push(`page-${i}`);
  }
  const logged = ids.map((id) => lines().filter((line) => line.reqId === id));
  assert.deepEqual(
    logged.map((mine) => mine.length),
    [1, 1, 1],
  );
  const [viaRoute, , fromCache] = logged.map((mine) => mine[0]!);
  assert.deepEqual(Object.keys(fromCache!).sort(), Object.keys(viaRoute!).sort());
  for (const line of [viaRoute!, fromCache!]) {
    assert.equal(line.msg, 'request completed');
    assert.equal(line.operation, 'listPets');
    assert.equal(line.path, '/v1/pets');
    assert.equal(line.status, 200);
    assert.equal(typeof line.durationMs, 'number');
  }
  assert.ok(!lines().some((line) => JSON.stringify(line).includes(key)), 'a line names the key');
});

test('a request whose client goes away before its answer is logged once as aborted and leaves the in-flight count', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const reached: string[] = [];
  const store: Store = {
    ...real,
    listPets: async (query) => (reached.push('list'), await held, real.listPets(query)),
    createPet: async (pet) => (reached.push('create'), await held, real.createPet(pet)),
  };
  const { app, key, lines } = await loggedApp(t, { store });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.server.address() as AddressInfo;
  const body = '{"name":"Rex","categoryId":7}';
  const requests = {
    'gone-list': `GET /v1/pets?limit=1 HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${key}\r\nX-Request-Id: gone-list\r\n\r\n`,
    // Its whole body read before the client leaves: only the answer is missing.
    'gone-create':
      `POST /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${key}\r\nX-Request-Id: gone-create\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  };
  const sockets = Object.values(requests).map((request) => {
    const socket = connect(port, '127.0.0.1');
    socket.on('error', () => {});
    socket.write(request);
    return socket;
  });
  const deadline = Date.now() + 10_000;
  const until = async (done: () => boolean, what: string) => {
    while (!done()) {
      assert.ok(Date.now() < deadline, `timed out waiting for ${what}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  };
  await until(() => reached.length === 2, 'both requests to reach the store');
  // A reset: a client that only half-closes still gets its answer (methods.ts).
  for (const socket of sockets) socket.resetAndDestroy();
  const linesOf = (id: string) => lines().filter((line) => line.reqId === id);
  await until(() => Object.keys(requests).every((id) => linesOf(id).length > 0), 'the aborted lines');
  release();
  // Their handlers end after the clients left: their answers go nowhere and are not logged.
  await new Promise((resolve) => setTimeout(resolve, 100));
  const expected = { 'gone-list': ['listPets', 'GET'], 'gone-create': ['createPet', 'POST'] };
  for (const [id, [operation, method]] of Object.entries(expected)) {
    const mine = linesOf(id);
    assert.equal(mine.length, 1, JSON.stringify(mine));
    assert.equal(mine[0]!.msg, 'request aborted by client');
    assert.equal(mine[0]!.operation, operation);
    assert.equal(mine[0]!.method, method);
    assert.equal(mine[0]!.path, '/v1/pets');
  }
  const scrape = await app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${key}` } });
  assert.equal(scrape.statusCode, 200);
  // The scrape itself is the one request in flight.
  assert.match(scrape.body, /^petstore_http_requests_in_flight 1$/m);
  assert.doesNotMatch(scrape.body, /petstore_http_requests_total\{[^}]*operation="(listPets|createPet)"/);
});
