import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open.js';
import { StoreUnavailableError } from '../src/store/store.js';
import { childEnv, runCli } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

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
