import assert from 'node:assert/strict';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { startApp, tempSqliteStore } from './helpers.js';
import { assertRawError, exchange, parseResponse } from './raw.js';

/** The app on a real socket (SQLite: these tests are about connections), with `env` settings. */
async function listen(t: TestContext, env: Record<string, string> = {}) {
  const app = await startApp(t, { env, store: (await tempSqliteStore(t)).store });
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  const get = async (path = '/v1/pets') => {
    const started = performance.now();
    const response = await fetch(`http://127.0.0.1:${port}${path}`, {
      headers: { authorization: `Bearer ${app.key}`, connection: 'close' },
    });
    await response.text();
    return { status: response.status, ms: performance.now() - started, headers: response.headers };
  };
  return { ...app, port, get };
}

/** An open connection; `closed` resolves with what the server sent when it closes it, and when. */
function open(port: number): { socket: Socket; closed: Promise<{ raw: string; at: number }> } {
  const socket = connect({ port, host: '127.0.0.1' });
  const chunks: Buffer[] = [];
  socket.on('data', (chunk) => chunks.push(chunk));
  const closed = new Promise<{ raw: string; at: number }>((resolve) => {
    const done = () => resolve({ raw: Buffer.concat(chunks).toString('utf8'), at: performance.now() });
    socket.on('close', done);
    socket.on('error', () => {});
  });
  return { socket, closed };
}

/** Sends `text` one byte every `everyMs` until the socket closes or `text` runs out. */
function trickle(socket: Socket, text: string, everyMs: number): void {
  let i = 0;
  const timer = setInterval(() => {
    if (i >= text.length || socket.destroyed) return clearInterval(timer);
    socket.write(text[i++]!);
  }, everyMs);
  socket.on('close', () => clearInterval(timer));
}

test('a URL over 8 KiB is 414 uri_too_long, before the key is checked; shorter URLs are served', async (t) => {
  const app = await listen(t);
  const long = `/v1/pets?status=${'a'.repeat(8 * 1024)}`;
  for (const auth of ['', `Authorization: Bearer ${app.key}\r\n`]) {
    const raw = await exchange(app.port, `GET ${long} HTTP/1.1\r\nHost: x\r\n${auth}\r\n`);
    assertRawError(raw, 'HTTP/1.1 414 URI Too Long', 'uri_too_long', 414);
  }
  const unknown = await exchange(app.port, `GET /${'x'.repeat(9000)} HTTP/1.1\r\nHost: x\r\n\r\n`);
  assertRawError(unknown, 'HTTP/1.1 414 URI Too Long', 'uri_too_long', 414);
  assert.equal((await app.get(`/v1/pets?status=${'a'.repeat(100)}`)).status, 400);
  assert.equal((await app.get('/v1/pets?limit=5')).status, 200);
});

test('a client sending its headers one byte at a time is cut off with 408; others are not delayed', async (t) => {
  const app = await listen(t, { PETSTORE_HEADERS_TIMEOUT_MS: '600', PETSTORE_REQUEST_TIMEOUT_MS: '1200' });
  const started = performance.now();
  const slow = open(app.port);
  trickle(slow.socket, `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`, 50);
  // Meanwhile, well-behaved clients are answered at once.
  for (let i = 0; i < 5; i++) {
    const response = await app.get();
    assert.equal(response.status, 200);
    assert.ok(response.ms < 300, `a normal request took ${Math.round(response.ms)} ms`);
  }
  const { raw, at } = await slow.closed;
  assertRawError(raw, 'HTTP/1.1 408 Request Timeout', 'request_timeout', 408);
  assert.ok(at - started < 2_500, `the slow client was cut off after ${Math.round(at - started)} ms`);
  assert.equal((await app.get()).status, 200);
});

test('a client sending its body one byte at a time is cut off with 408, and nothing is stored', async (t) => {
  const app = await listen(t, { PETSTORE_HEADERS_TIMEOUT_MS: '400', PETSTORE_REQUEST_TIMEOUT_MS: '800' });
  const body = '{"name":"Rex","categoryId":7}';
  const started = performance.now();
  const slow = open(app.port);
  slow.socket.write(
    'POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
      `Authorization: Bearer ${app.key}\r\nContent-Length: ${body.length}\r\n\r\n`,
  );
  trickle(slow.socket, body, 100);
  const response = await app.get();
  assert.equal(response.status, 200);
  assert.ok(response.ms < 300, `a normal request took ${Math.round(response.ms)} ms`);
  const { raw, at } = await slow.closed;
  assertRawError(raw, 'HTTP/1.1 408 Request Timeout', 'request_timeout', 408);
  assert.ok(at - started < 2_500, `the slow client was cut off after ${Math.round(at - started)} ms`);
  assert.deepEqual(await app.store.listPets({ limit: 10 }), []);
});

test('connections past PETSTORE_MAX_CONNECTIONS are closed at once; a freed slot serves again', async (t) => {
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '3' });
  const held = [open(app.port), open(app.port), open(app.port)];
  await Promise.all(held.map(({ socket }) => new Promise((resolve) => socket.once('connect', resolve))));
  await new Promise((resolve) => setTimeout(resolve, 50));
  const extra = open(app.port);
  extra.socket.write(`GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`);
  assert.equal((await extra.closed).raw, '', 'refused without an answer');

  held[0]!.socket.destroy();
  await held[0]!.closed;
  await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal((await app.get()).status, 200);
  for (const { socket } of held) socket.destroy();
});

test('a connection that sends nothing is closed with 408 after PETSTORE_HEADERS_TIMEOUT_MS', async (t) => {
  const app = await listen(t, { PETSTORE_HEADERS_TIMEOUT_MS: '300', PETSTORE_REQUEST_TIMEOUT_MS: '600' });
  const started = performance.now();
  const silent = open(app.port);
  const { raw, at } = await silent.closed;
  assertRawError(raw, 'HTTP/1.1 408 Request Timeout', 'request_timeout', 408);
  assert.ok(at - started >= 250 && at - started < 1_500, `closed after ${Math.round(at - started)} ms`);
  assert.equal((await app.get()).status, 200);
});

test('answers carry nosniff and no-store, and no X-Powered-By', async (t) => {
  const app = await listen(t);
  for (const [path, status] of [
    ['/v1/pets', 200],
    ['/v1/pets?limit=0', 400],
    ['/v1/pets/1', 404],
    ['/v1/nothing', 404],
    ['/v1/openapi.json', 200],
    ['/healthz', 200],
  ] as const) {
    const response = await app.get(path);
    assert.equal(response.status, status, path);
    assert.equal(response.headers.get('x-content-type-options'), 'nosniff', path);
    assert.equal(response.headers.get('cache-control'), 'no-store', path);
    assert.equal(response.headers.get('x-powered-by'), null, path);
  }
  const raw = parseResponse(await exchange(app.port, 'BREW /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n'));
  assert.equal(raw.headers.get('x-content-type-options'), 'nosniff');
  assert.equal(raw.headers.get('cache-control'), 'no-store');
});

test('CORS is off unless configured: no Access-Control headers, and OPTIONS is 405', async (t) => {
  const app = await startApp(t);
  const response = await app.call({ method: 'GET', url: '/v1/pets', headers: { origin: 'https://shop.example' } });
  assert.equal(response.statusCode, 200);
  assert.equal(response.headers['access-control-allow-origin'], undefined);
  const preflight = await app.call({
    method: 'OPTIONS',
    url: '/v1/pets',
    headers: { origin: 'https://shop.example', 'access-control-request-method': 'POST' },
  });
  assert.equal(preflight.statusCode, 405);
  assert.equal(preflight.headers['access-control-allow-origin'], undefined);
});

test('with PETSTORE_CORS_ORIGINS, listed origins may call the API and others may not', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_CORS_ORIGINS: 'https://shop.example,https://admin.example' } });
  const preflight = await app.app.inject({
    method: 'OPTIONS',
    url: '/v1/pets',
    headers: {
      origin: 'https://shop.example',
      'access-control-request-method': 'POST',
      'access-control-request-headers': 'authorization, content-type, idempotency-key',
    },
  });
  assert.equal(preflight.statusCode, 204);
  assert.equal(preflight.headers['access-control-allow-origin'], 'https://shop.example');
  assert.match(String(preflight.headers['access-control-allow-methods']), /POST/);
  assert.match(String(preflight.headers['access-control-allow-headers']), /Idempotency-Key/);

  const allowed = await app.call({ method: 'GET', url: '/v1/pets', headers: { origin: 'https://admin.example' } });
  assert.equal(allowed.headers['access-control-allow-origin'], 'https://admin.example');
  assert.match(String(allowed.headers['access-control-expose-headers']), /RateLimit/);
  const other = await app.call({ method: 'GET', url: '/v1/pets', headers: { origin: 'https://evil.example' } });
  assert.equal(other.statusCode, 200);
  assert.equal(other.headers['access-control-allow-origin'], undefined);
});
