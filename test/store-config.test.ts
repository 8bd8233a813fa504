import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open.js';
import { StoreUnavailableError } from '../src/store/store.js';
import { openPostgresStore, withJitOff } from '../src/store/postgres.js';
import { PostgresProxy } from './pg-proxy.js';
import { childEnv, runCli } from './process.js';
import { createPostgresSchema, POSTGRES_URL, postgresSkip } from './stores.js';

test('DATABASE_URL chooses PostgreSQL; absent or empty, SQLite', async (t) => {
  assert.equal(loadConfig({}).databaseUrl, undefined);
  assert.equal(loadConfig({ DATABASE_URL: '' }).databaseUrl, undefined);
  const config = loadConfig({
    DATABASE_URL: 'postgresql://petstore@127.0.0.1:1/petstore',
    PETSTORE_DB_TIMEOUT_MS: '500',
  });
  const store = await openStore(config);
  t.after(() => store.close());
  await assert.rejects(store.ping(), StoreUnavailableError);
});

test('DATABASE_URL must be a postgres URL, and a refused one is never echoed with its password', () => {
  assert.throws(
    () => loadConfig({ DATABASE_URL: 'mysql://admin:hunter2@db/petstore' }),
    (error: Error) =>
      error instanceof ConfigError &&
      error.message.startsWith('DATABASE_URL must be a postgres:// or postgresql:// URL') &&
      !error.message.includes('hunter2'),
  );
  assert.throws(
    () => loadConfig({ DATABASE_URL: 'hunter2' }),
    (error: Error) => !error.message.includes('hunter2'),
  );
});

test('PETSTORE_PG_POOL_SIZE and PETSTORE_DB_TIMEOUT_MS have defaults and bounds', () => {
  const config = loadConfig({});
  assert.equal(config.pgPoolSize, 10);
  assert.equal(config.dbTimeoutMs, 5000);
  assert.throws(() => loadConfig({ PETSTORE_PG_POOL_SIZE: '0' }), /PETSTORE_PG_POOL_SIZE must be an integer from 1/);
  assert.throws(() => loadConfig({ PETSTORE_DB_TIMEOUT_MS: 'soon' }), /PETSTORE_DB_TIMEOUT_MS must be an integer/);
});

test('petstore migrate and keys create work on PostgreSQL through DATABASE_URL', { skip: postgresSkip }, async (t) => {
  const env = childEnv(t, { DATABASE_URL: await createPostgresSchema(t) });
  const first = await runCli(['migrate'], env);
  assert.equal(first.code, 0, first.stderr);
  assert.match(
    first.stderr,
    /^Using the PostgreSQL database postgres:.+ \(DATABASE_URL\)\.\nApplied 001_pets_and_keys \([0-9]+ ms\)\.\nApplied 002_idempotency_keys \([0-9]+ ms\)\.\n/,
  );
  const again = await runCli(['migrate'], env);
  assert.match(again.stderr, /The database is up to date\./);
  const created = await runCli(['keys', 'create', '--name', 'ci', '--json'], env);
  assert.equal(created.code, 0, created.stderr);
  assert.equal(JSON.parse(created.stdout).id, 1);
});

test('the limit settings read lists, off and bounds, and a bad value names its variable', () => {
  const config = loadConfig({
    PETSTORE_TRUST_PROXY: ' 10.0.0.0/8, ::1 ,192.0.2.7',
    PETSTORE_CORS_ORIGINS: 'https://shop.example,http://127.0.0.1:3000',
    PETSTORE_RATE_LIMIT: 'off',
  });
  assert.deepEqual(config.trustProxy, ['10.0.0.0/8', '::1', '192.0.2.7']);
  assert.deepEqual(config.corsOrigins, ['https://shop.example', 'http://127.0.0.1:3000']);
  assert.equal(config.rateLimit, undefined);
  assert.deepEqual(loadConfig({}).trustProxy, []);
  for (const [env, value] of [
    ['PETSTORE_TRUST_PROXY', '10.0.0.0/33'],
    ['PETSTORE_TRUST_PROXY', 'proxy.internal'],
    ['PETSTORE_TRUST_PROXY', '10.0.0.1/8/8'],
    ['PETSTORE_CORS_ORIGINS', 'https://shop.example/'],
    ['PETSTORE_CORS_ORIGINS', 'shop.example'],
    ['PETSTORE_RATE_LIMIT', '0'],
    ['PETSTORE_RATE_LIMIT', 'never'],
  ] as const) {
    assert.throws(
      () => loadConfig({ [env]: value }),
      (error: Error) => error instanceof ConfigError && error.message.startsWith(`${env} must be`),
      `${env}=${value}`,
    );
  }
  assert.throws(
    () => loadConfig({ PETSTORE_HEADERS_TIMEOUT_MS: '5000', PETSTORE_REQUEST_TIMEOUT_MS: '1000' }),
    /PETSTORE_REQUEST_TIMEOUT_MS must be at least PETSTORE_HEADERS_TIMEOUT_MS/,
  );
});

test(
  'PostgreSQL: every connection of the store asks for JIT off, keeping the options DATABASE_URL gives',
  { skip: postgresSkip },
  async (t) => {
    // The counts of events waiting misled the planner into JIT, whose compiling took far longer than
    // the statement (docs/webhooks.md#the-relay); no statement of the service gains from it.
    assert.equal(withJitOff('postgres://db.example/shop'), 'postgres://db.example/shop?options=-c+jit%3Doff');
    const target = new URL(POSTGRES_URL);
    const proxy = new PostgresProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    t.after(() => proxy.stop());
    const url = new URL(await createPostgresSchema(t));
    const schema = /search_path=(\S+)/.exec(url.searchParams.get('options')!)![1]!;
    url.host = `127.0.0.1:${proxy.port}`;
    const store = openPostgresStore(url.href, { poolSize: 3 });
    t.after(() => store.close());
    await store.migrate();
    await Promise.all([1, 2, 3].map((n) => store.createPet({ name: `pet ${n}`, categoryId: 1n, status: 'sold' })));
    assert.deepEqual(await store.countPetsByStatus(), { available: 0, pending: 0, sold: 3 });
    assert.ok(proxy.startups.length >= 2, `${proxy.startups.length} connections`);
    for (const startup of proxy.startups) assert.equal(startup.options, `-c search_path=${schema} -c jit=off`);
  },
);
