import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.js';
import { startApp } from './helpers.js';
import { childEnv, runCli } from './process.js';

async function serversOf(env: Record<string, string>, t: Parameters<typeof startApp>[0]) {
  const { app } = await startApp(t, { env });
  const response = await app.inject({ method: 'GET', url: '/v1/openapi.json' });
  assert.equal(response.statusCode, 200);
  const { servers } = response.json() as { servers: { url: string; description: string }[] };
  return servers.map(({ url, description }) => ({ url, description }));
}

test('the OpenAPI document lists production, then staging, from their settings', async (t) => {
  const servers = await serversOf(
    { PETSTORE_PUBLIC_URL: 'https://api.example.com/v1/', PETSTORE_STAGING_URL: 'https://staging.example.com/v1' },
    t,
  );
  assert.deepEqual(servers, [
    { url: 'https://api.example.com/v1', description: 'production' },
    { url: 'https://staging.example.com/v1', description: 'staging' },
  ]);
});

test('PETSTORE_STAGING_URL set empty lists no staging address', async (t) => {
  const servers = await serversOf({ PETSTORE_PUBLIC_URL: 'https://api.example.com/v1', PETSTORE_STAGING_URL: '' }, t);
  assert.deepEqual(servers, [{ url: 'https://api.example.com/v1', description: 'production' }]);
  assert.equal(loadConfig({ PETSTORE_STAGING_URL: '' }).stagingUrl, undefined);
  // Unset, it keeps its default.
  assert.equal(loadConfig({}).stagingUrl, 'http://127.0.0.1:8081/v1');
});

test('a public or staging address that does not end in /v1 is refused, naming the variable', () => {
  for (const name of ['PETSTORE_PUBLIC_URL', 'PETSTORE_STAGING_URL']) {
    for (const value of [
      'https://api.example.com',
      'https://api.example.com/',
      'https://api.example.com/v2',
      'https://api.example.com/v1/pets',
      'https://api.example.com/v10',
      'https://api.example.com/v1?x=1',
      'api.example.com/v1',
      'ftp://api.example.com/v1',
    ]) {
      assert.throws(
        () => loadConfig({ [name]: value }),
        (error: unknown) =>
          error instanceof ConfigError &&
          error.message ===
            `${name} must be an absolute http or https URL ending in /v1, like https://api.example.com/v1 (got ${JSON.stringify(value)})`,
        `${name}=${value}`,
      );
    }
  }
  assert.throws(() => loadConfig({ PETSTORE_PUBLIC_URL: '' }), ConfigError, 'the public address cannot be empty');
  const behindPrefix = loadConfig({ PETSTORE_PUBLIC_URL: 'https://example.com/shop/v1' });
  assert.equal(behindPrefix.publicUrl, 'https://example.com/shop/v1');
});

test('serve refuses a public address without /v1 in one line, exit 2, before it touches the database', async (t) => {
  const env = childEnv(t, { PETSTORE_PUBLIC_URL: 'https://api.example.com' });
  const { code, stderr } = await runCli(['serve'], env, 60_000);
  assert.equal(code, 2, stderr);
  assert.equal(
    stderr,
    'petstore: PETSTORE_PUBLIC_URL must be an absolute http or https URL ending in /v1, like https://api.example.com/v1 (got "https://api.example.com")\n',
  );
  assert.ok(!existsSync(env.PETSTORE_DB!), 'no database was created');
});
