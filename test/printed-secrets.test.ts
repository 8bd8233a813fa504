import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../src/config.js';
import { childEnv, runCli } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

const MAIN = new URL('../dist/main.js', import.meta.url).pathname;
const SECRETS = ['hunter2', 'hunter3', 'hunter4'];

/** The URL with a password in each place libpq takes one: user:pass@, ?password=, ?sslpassword=. */
function withPasswords(url: string): string {
  const parsed = new URL(url);
  parsed.username = 'postgres';
  parsed.password = 'hunter2';
  parsed.searchParams.set('password', 'hunter3');
  parsed.searchParams.set('sslpassword', 'hunter4');
  return parsed.href;
}

function assertNoSecret(output: string) {
  for (const secret of SECRETS) assert.ok(!output.includes(secret), `${secret} printed:\n${output}`);
}

/** Runs `petstore serve` until `use` resolves, then SIGTERM; everything it wrote on stdout and stderr. */
async function serveUntil(
  t: TestContext,
  env: Record<string, string>,
  use: (url: string, output: () => string) => Promise<void>,
) {
  const child = spawn(process.execPath, [MAIN, 'serve'], { env });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  child.stderr.on('data', (chunk) => (output += chunk));
  const listening = new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk) => {
      output += chunk;
      const match = /Server listening at (http:\/\/127\.0\.0\.1:[0-9]+)/.exec(output);
      if (match) resolve(match[1]!);
    });
    void exited.then(() => reject(new Error(`serve exited before listening:\n${output}`)));
  });
  await use(await listening, () => output);
  child.kill('SIGTERM');
  assert.equal(await exited, 0, output);
  return output;
}

test('a DATABASE_URL refused by the configuration is shown with every password hidden', () => {
  for (const url of [
    'mysql://admin:hunter2@db/petstore?password=hunter3&sslpassword=hunter4',
    'postgres://admin:hunter2@db:99999/petstore?password=hunter3',
    'hunter2',
  ]) {
    assert.throws(
      () => loadConfig({ DATABASE_URL: url }),
      (error: Error) =>
        error.message.startsWith('DATABASE_URL must be') && !SECRETS.some((s) => error.message.includes(s)),
      url,
    );
  }
});

test('petstore prints no DATABASE_URL password on a refused setting or a start-up failure', async (t) => {
  const refused = await runCli(['serve'], childEnv(t, { DATABASE_URL: 'mysql://admin:hunter2@db/x?password=hunter3' }));
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /DATABASE_URL must be a postgres/);
  assertNoSecret(refused.stdout + refused.stderr);

  // Nothing listens on port 1: the start-up fails once the timeout passes.
  const unreachable = withPasswords('postgres://127.0.0.1:1/petstore');
  for (const command of [['serve'], ['migrate'], ['keys', 'list']]) {
    const env = childEnv(t, { DATABASE_URL: unreachable, PETSTORE_DB_TIMEOUT_MS: '500' });
    const { code, stdout, stderr } = await runCli(command, env);
    assert.equal(code, 1, `${command.join(' ')}: ${stderr}`);
    assert.match(stderr, /cannot be reached|ECONNREFUSED/);
    assertNoSecret(stdout + stderr);
  }
});

/** The first key, once `output` shows it (it follows the listening line). */
async function firstKey(output: () => string): Promise<string> {
  for (let waited = 0; waited < 5000; waited += 20) {
    const key = /^ {4}(psk_[A-Za-z0-9_-]{43})$/m.exec(output())?.[1];
    if (key) return key;
    await sleep(20);
  }
  throw new Error(`no first key printed:\n${output()}`);
}

/** A few requests of each kind: with the key, with a wrong one, with none, and to public paths. */
async function useService(base: string, key: string) {
  for (const authorization of [`Bearer ${key}`, 'Bearer psk_wrong', '']) {
    for (const path of ['/v1/pets', '/metrics', '/v1/pets/1']) {
      await (await fetch(base + path, { headers: authorization ? { authorization } : {} })).arrayBuffer();
    }
    const body = '{"name":"Rex","categoryId":7}';
    const headers = { authorization, 'content-type': 'application/json' };
    await (await fetch(`${base}/v1/pets`, { method: 'POST', headers, body })).arrayBuffer();
  }
  for (const path of ['/readyz', '/healthz', '/nowhere']) await (await fetch(base + path)).arrayBuffer();
}

test(
  'a service on a DATABASE_URL with passwords never prints them, logging at trace',
  { skip: postgresSkip },
  async (t) => {
    const url = withPasswords(await createPostgresSchema(t));
    const env = childEnv(t, { DATABASE_URL: url, LOG_LEVEL: 'trace' });
    assertNoSecret(await serveUntil(t, env, async (base, output) => useService(base, await firstKey(output))));
  },
);

test("the first key appears exactly once in the service's whole output, stdout and stderr, logging at trace", async (t) => {
  let key = '';
  const output = await serveUntil(t, childEnv(t, { LOG_LEVEL: 'trace' }), async (base, soFar) => {
    key = await firstKey(soFar);
    await useService(base, key);
  });
  assert.equal(output.split(key).length - 1, 1, output);
  assert.deepEqual(output.match(/psk_[A-Za-z0-9_-]{20,}/g), [key], 'no other key-like text');
  assert.match(output, /No API key existed, so this one was created/);
});
