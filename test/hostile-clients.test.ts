import assert from 'node:assert/strict';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { loadConfig } from '../src/config.js';
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

test('past PETSTORE_MAX_CONNECTIONS, a connection from the address holding every slot is closed at once while each of them has begun a request; a freed slot serves again', async (t) => {
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '3' });
  const held = [];
  for (let i = 0; i < 3; i++) {
    const connection = open(app.port);
    await new Promise((resolve) => connection.socket.once('connect', resolve));
    connection.socket.write('GET /v1/pets HTTP/1.1\r\n');
    await new Promise((resolve) => setTimeout(resolve, 30));
    held.push(connection);
  }
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
    // The router refuses a malformed percent-encoding before any hook runs.
    ['/v1/pets/%zz', 404],
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

/** Hostile connections the server closed (or reset). */
const endedByServer = new WeakSet<Socket>();

/** How many of `sockets` the server has not closed, a moment from now. */
async function stillOpen(sockets: Socket[]): Promise<number> {
  await new Promise((resolve) => setTimeout(resolve, 200));
  return sockets.filter((socket) => !endedByServer.has(socket)).length;
}

// A request begun and never finished: such a client is no longer silent, and waits for its 408.
const BEGUN = 'GET /v1/pets HTTP/1.1\r\n';

/**
 * Hostile connections, which never close their side whatever the server does. Call it before
 * the app is built: its sockets are destroyed after the test before the app closes, whose
 * close would otherwise wait for them.
 */
function hostile(t: TestContext) {
  const sockets: Socket[] = [];
  t.after(() => sockets.forEach((socket) => socket.destroy()));
  return (port: number, text = '', localAddress = '127.0.0.1'): Promise<Socket> =>
    new Promise((resolve, reject) => {
      const socket = connect({ port, host: '127.0.0.1', localAddress, allowHalfOpen: true });
      sockets.push(socket);
      socket.on('error', () => {});
      socket.once('end', () => endedByServer.add(socket));
      socket.once('close', () => endedByServer.add(socket));
      socket.once('connect', () => {
        if (!text) return resolve(socket);
        // Resolved once the server has surely read what was sent.
        socket.write(text, () => setTimeout(() => resolve(socket), 30));
      });
      socket.once('error', reject);
    });
}

/** What the server sends on a new connection from `localAddress` to `text`, until it closes. */
function answerTo(port: number, text: string, localAddress = '127.0.0.1'): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), 5_000);
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', () => {});
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.write(text);
  });
}

/** The start of the answer to `text` on a new connection from `localAddress`, which stays open until the test ends. */
function keptOpen(t: TestContext, port: number, text: string, localAddress: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1', localAddress });
    t.after(() => socket.destroy());
    socket.on('error', reject);
    socket.once('data', (chunk) => resolve(chunk.toString('utf8')));
    socket.once('close', () => resolve(''));
    socket.write(text);
  });
}

/** Milliseconds until a GET with the key over a new connection from `localAddress` is answered 200. */
async function servedAfter(port: number, key: string, localAddress = '127.0.0.1', giveUpMs = 15_000) {
  const started = performance.now();
  for (;;) {
    const raw = await answerTo(
      port,
      `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nConnection: close\r\n\r\n`,
      localAddress,
    );
    if (raw.startsWith('HTTP/1.1 200')) return performance.now() - started;
    assert.ok(performance.now() - started < giveUpMs, `not served within ${giveUpMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

test('clients that never close after their 408 hold no slot: the next client is served', async (t) => {
  const hold = hostile(t);
  const app = await listen(t, {
    PETSTORE_MAX_CONNECTIONS: '4',
    PETSTORE_HEADERS_TIMEOUT_MS: '500',
    PETSTORE_REQUEST_TIMEOUT_MS: '1000',
  });
  for (let i = 0; i < 4; i++) await hold(app.port, BEGUN);
  const waited = await servedAfter(app.port, app.key);
  assert.ok(waited < 3_000, `the next client waited ${Math.round(waited)} ms`);
  // Every one of them is let go, not only the first.
  const open = () => new Promise<number>((resolve) => app.app.server.getConnections((_, n) => resolve(n)));
  const started = performance.now();
  while ((await open()) > 0) {
    assert.ok(performance.now() - started < 3_000, `${await open()} connections still open`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
});

/**
 * The app with `env`, and `count` connections that send nothing, taking every slot `env` leaves
 * them; then a new client, served at once: the oldest of the silent ones was closed for it.
 */
async function fillWithSilent(t: TestContext, env: Record<string, string>, count: number) {
  const hold = hostile(t);
  const app = await listen(t, env);
  const silent: Socket[] = [];
  for (let i = 0; i < count; i++) silent.push(await hold(app.port));
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
  assert.ok(endedByServer.has(silent[0]!), 'the oldest silent connection made room');
  return { hold, app, silent };
}

test('when every slot is taken by clients that sent nothing, the oldest of them makes room: the next client is served at once', async (t) => {
  const { hold, app } = await fillWithSilent(t, { PETSTORE_MAX_CONNECTIONS: '4' }, 4);
  // One that has begun its request is never closed to make room.
  const begun = [];
  for (let i = 0; i < 3; i++) begun.push(await hold(app.port, BEGUN));
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
  assert.equal(await stillOpen(begun), 3);
});

test('clients that never close after the answer to CONNECT hold no slot: the next client is served at once', async (t) => {
  const hold = hostile(t);
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '4' });
  for (const target of ['127.0.0.1:443', '/v1/pets', 'x:1', '/']) {
    await hold(app.port, `CONNECT ${target} HTTP/1.1\r\nHost: x\r\n\r\n`);
  }
  await new Promise((resolve) => setTimeout(resolve, 200));
  const waited = await servedAfter(app.port, app.key);
  assert.ok(waited < 1_000, `the next client waited ${Math.round(waited)} ms`);
});

test('idle keep-alive connections are closed after PETSTORE_KEEP_ALIVE_TIMEOUT_MS (5 s by default)', async (t) => {
  // The default, as the server is given it; the wait itself is shown on a short setting.
  assert.equal(loadConfig({}).keepAliveTimeoutMs, 5_000);
  const defaults = await listen(t);
  assert.equal(defaults.app.server.keepAliveTimeout, 5_000);
  const hold = hostile(t);
  const app = await listen(t, { PETSTORE_KEEP_ALIVE_TIMEOUT_MS: '1000' });
  assert.equal(app.app.server.keepAliveTimeout, 1_000);
  const started = performance.now();
  const socket = await hold(app.port, `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`);
  socket.resume();
  await new Promise((resolve) => {
    socket.once('end', resolve);
    socket.once('close', resolve);
  });
  const waited = performance.now() - started;
  assert.ok(waited > 600 && waited < 4_000, `the idle connection was closed after ${Math.round(waited)} ms`);
});

test('with every slot held by idle keep-alive connections, one of them makes room at once: the next clients are served', async (t) => {
  const hold = hostile(t);
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '4' });
  assert.equal(app.config.keepAliveTimeoutMs, 5_000);
  const idle = [];
  for (let i = 0; i < 4; i++) {
    idle.push(await hold(app.port, `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`));
  }
  // They read their answers (so that they see the server's FIN), and send nothing more.
  for (const socket of idle) socket.resume();
  // Long enough for them to count as idle (no byte between two looks).
  await new Promise((resolve) => setTimeout(resolve, 400));
  // New clients that keep their connections: each needs a slot of its own.
  for (const from of ['127.0.0.2', '127.0.0.3', '127.0.0.4']) {
    const started = performance.now();
    const answer = await keptOpen(
      t,
      app.port,
      `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`,
      from,
    );
    assert.match(answer, /^HTTP\/1\.1 200 /);
    assert.ok(performance.now() - started < 1_000, `a new client waited ${Math.round(performance.now() - started)} ms`);
  }
  // Far before the keep-alive timeout: three given up for them (one spare slot), with a FIN.
  assert.equal(await stillOpen(idle), 1);
  const metrics = await app.app.inject({ url: '/metrics', headers: { authorization: `Bearer ${app.key}` } });
  const counted = /^petstore_connections_closed_total\{reason="idle_evicted"\} ([0-9]+)$/m.exec(metrics.body);
  assert.equal(Number(counted?.[1]), 3);
});

test('one address holds at most PETSTORE_MAX_CONNECTIONS_PER_ADDRESS connections; other addresses are served', async (t) => {
  const hold = hostile(t);
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: '3' });
  const held = [];
  for (let i = 0; i < 3; i++) held.push(await hold(app.port, BEGUN));
  await new Promise((resolve) => setTimeout(resolve, 100));
  const extra = await answerTo(
    app.port,
    `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${app.key}\r\n\r\n`,
  );
  assert.equal(extra, '', 'a fourth connection from the address is closed without an answer');
  assert.equal(await stillOpen(held), 3);
  assert.ok((await servedAfter(app.port, app.key, '127.0.0.2')) < 1_000);
  held[0]!.destroy();
  await new Promise((resolve) => setTimeout(resolve, 100));
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
});

test('past PETSTORE_MAX_CONNECTIONS_PER_ADDRESS, the address’s oldest connection that sent nothing makes room', async (t) => {
  const { silent } = await fillWithSilent(t, { PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: '3' }, 3);
  assert.equal(await stillOpen(silent), 2);
});

test('connections from a trusted proxy are not capped per address', async (t) => {
  const hold = hostile(t);
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: '2', PETSTORE_TRUST_PROXY: '127.0.0.0/8' });
  const held = [];
  for (let i = 0; i < 4; i++) held.push(await hold(app.port, BEGUN));
  assert.equal(await stillOpen(held), 4);
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
});

test('with the defaults, 1,024 silent sockets from one address all stay open; then a normal client, from it or another, is served at once', async (t) => {
  const hold = hostile(t);
  const app = await listen(t);
  assert.equal(app.config.maxConnectionsPerAddress, undefined);
  assert.equal(app.config.maxConnections, 1024);
  const silent: Socket[] = [];
  for (let i = 0; i < 1024; i += 64)
    silent.push(...(await Promise.all([...Array(64).keys()].map(() => hold(app.port)))));
  // Slots are shared only when they run out: none was closed for its address.
  assert.equal(await stillOpen(silent), 1024);
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
  assert.ok((await servedAfter(app.port, app.key, '127.0.0.2')) < 1_000);
  // The address holding every slot gave up one for each: its oldest silent ones.
  const left = await stillOpen(silent);
  assert.ok(left >= 1020 && left <= 1023, `${left} still open`);
  assert.ok(endedByServer.has(silent[0]!));
});

test('with the defaults, 1,024 silent sockets from many addresses, then a normal client is served at once', async (t) => {
  const hold = hostile(t);
  const app = await listen(t);
  const silent: Socket[] = [];
  for (let i = 0; i < 1024; i += 64) {
    const from = `127.0.1.${1 + i / 64}`;
    silent.push(...(await Promise.all([...Array(64).keys()].map(() => hold(app.port, '', from)))));
  }
  assert.ok((await servedAfter(app.port, app.key, '127.0.0.2')) < 1_000);
  assert.ok((await servedAfter(app.port, app.key)) < 1_000);
});
