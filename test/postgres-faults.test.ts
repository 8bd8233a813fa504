import assert from 'node:assert/strict';
import { once } from 'node:events';
import { describe, test, type TestContext } from 'node:test';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { makeKey } from '../src/keys/keys.js';
import { openPostgresStore } from '../src/store/postgres.js';
import { StoreUnavailableError, type Store } from '../src/store/store.js';
import { assertError, manualClock, postRaw, startApp } from './helpers.js';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { PostgresProxy } from './pg-proxy.js';
import { createPostgresSchema, POSTGRES_URL, postgresSkip } from './stores.js';

const TIMEOUT_MS = 1000;
const BOUND_MS = TIMEOUT_MS + 1000;

async function startProxy(t: TestContext): Promise<PostgresProxy> {
  const target = new URL(POSTGRES_URL);
  const proxy = new PostgresProxy(target.hostname, Number(target.port || 5432));
  await proxy.start();
  t.after(() => proxy.stop());
  return proxy;
}

/** The service on `store`, with no key issued (the store may be unreachable): a well-formed key is sent. */
async function startBareApp(t: TestContext, store: Store) {
  const app = await buildApp({ config: loadConfig({}), store, clock: manualClock(), logger: false });
  t.after(() => app.close());
  const key = makeKey();
  return (options: { method: 'GET' | 'POST'; url: string; payload?: string }) =>
    app.inject({
      ...options,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    });
}

async function timed<T>(run: () => Promise<T>): Promise<[T, number]> {
  const start = performance.now();
  const result = await run();
  return [result, performance.now() - start];
}

function openUnreachable(t: TestContext, port: number): Store {
  const store = openPostgresStore(`postgres://postgres@127.0.0.1:${port}/test`, { timeoutMs: TIMEOUT_MS });
  t.after(() => store.close());
  return store;
}

describe('PostgreSQL that refuses connections', () => {
  test('answers /readyz and the operations with 503 unavailable at once, auth lookup included', async (t) => {
    const call = await startBareApp(t, openUnreachable(t, 1));
    for (const request of [
      { method: 'GET', url: '/readyz' },
      { method: 'GET', url: '/v1/pets' },
      { method: 'GET', url: '/v1/pets/1' },
      { method: 'POST', url: '/v1/pets', payload: '{"name":"Rex","categoryId":7}' },
    ] as const) {
      const [response, ms] = await timed(() => call(request));
      assertError(response, 503, 'unavailable');
      assert.ok(ms < BOUND_MS, `${request.method} ${request.url} took ${Math.round(ms)} ms`);
    }
  });

  test('fails migrate and every store method with StoreUnavailableError', async (t) => {
    const store = openUnreachable(t, 1);
    await assert.rejects(store.migrate(), StoreUnavailableError);
    await assert.rejects(store.ping(), StoreUnavailableError);
    await assert.rejects(store.findActiveKey(Buffer.alloc(32)), StoreUnavailableError);
    await assert.rejects(
      store.createFirstKey({ name: 'first', hint: 'psk_', hash: Buffer.alloc(32), createdAt: new Date() }),
      StoreUnavailableError,
    );
  });
});

describe('PostgreSQL that accepts connections and never answers', () => {
  test('answers 503 unavailable within the database timeout', async (t) => {
    const sockets = new Set<Socket>();
    const blackHole = createServer((socket) => void sockets.add(socket.on('error', () => {})));
    blackHole.listen(0, '127.0.0.1');
    await once(blackHole, 'listening');
    t.after(() => {
      for (const socket of sockets) socket.destroy();
      blackHole.close();
    });
    const call = await startBareApp(t, openUnreachable(t, (blackHole.address() as AddressInfo).port));
    for (const url of ['/readyz', '/v1/pets']) {
      const [response, ms] = await timed(() => call({ method: 'GET', url }));
      assertError(response, 503, 'unavailable');
      assert.ok(ms >= TIMEOUT_MS - 100 && ms < BOUND_MS, `GET ${url} took ${Math.round(ms)} ms`);
    }
  });
});

describe('PostgreSQL going away and coming back', () => {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) => test(name, { skip: postgresSkip }, fn);

  async function startBehindProxy(t: TestContext) {
    const schemaUrl = new URL(await createPostgresSchema(t));
    const proxy = await startProxy(t);
    schemaUrl.hostname = '127.0.0.1';
    schemaUrl.port = String(proxy.port);
    const store = openPostgresStore(schemaUrl.href, { poolSize: 4, timeoutMs: TIMEOUT_MS });
    t.after(() => store.close());
    await store.migrate();
    const app = await startApp(t, { store });
    assert.equal((await postRaw(app, '{"name":"Rex","categoryId":7}')).statusCode, 201);
    return { app, proxy };
  }

  it('answers 503 while the database is down, then serves again once it is back', async (t) => {
    const { app, proxy } = await startBehindProxy(t);
    await proxy.stop();
    for (const url of ['/readyz', '/v1/pets']) {
      const [response, ms] = await timed(() => app.call({ method: 'GET', url }));
      assertError(response, 503, 'unavailable');
      assert.ok(ms < BOUND_MS, `GET ${url} took ${Math.round(ms)} ms`);
    }
    assertError(await postRaw(app, '{"name":"Tom","categoryId":8}'), 503, 'unavailable');

    await proxy.start();
    assert.equal((await app.call({ method: 'GET', url: '/readyz' })).statusCode, 200);
    const listed = await app.call({ method: 'GET', url: '/v1/pets' });
    assert.equal(listed.statusCode, 200);
    assert.equal(listed.body, '[{"id":1,"name":"Rex","categoryId":7,"status":"available"}]');
    assert.equal((await postRaw(app, '{"name":"Tom","categoryId":8}')).statusCode, 201);
  });

  it('answers 503 within the timeout when the database goes silent mid-connection', async (t) => {
    const { app, proxy } = await startBehindProxy(t);
    proxy.silent = true;
    const [response, ms] = await timed(() => app.call({ method: 'GET', url: '/v1/pets' }));
    assertError(response, 503, 'unavailable');
    assert.ok(ms < BOUND_MS, `GET /v1/pets took ${Math.round(ms)} ms`);

    proxy.silent = false;
    await proxy.stop();
    await proxy.start();
    assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
  });

  it('survives its connections being terminated by an administrator, and reconnects', async (t) => {
    const { app, proxy } = await startBehindProxy(t);
    assert.ok(proxy.upstreamPorts.size > 0);
    const admin = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 3000 });
    await admin.connect();
    try {
      const { rows } = await admin.query<{ terminated: boolean }>(
        'SELECT pg_terminate_backend(pid) AS terminated FROM pg_stat_activity WHERE client_port = ANY($1::int[])',
        [[...proxy.upstreamPorts]],
      );
      assert.ok(rows.length > 0 && rows.every((row) => row.terminated));
    } finally {
      await admin.end();
    }
    // The idle connections learn of it asynchronously; an 'error' event without a listener would end the process.
    await new Promise((resolve) => setTimeout(resolve, 100));
    const listed = await app.call({ method: 'GET', url: '/v1/pets' });
    assert.equal(listed.statusCode, 200);
    assert.equal(listed.body, '[{"id":1,"name":"Rex","categoryId":7,"status":"available"}]');
  });
});
