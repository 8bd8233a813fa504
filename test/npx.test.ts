import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { childEnv, runCli } from './process.js';

const ROOT = new URL('..', import.meta.url).pathname;
const KEY = /^psk_[A-Za-z0-9_-]{43}$/;
const { scripts } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  scripts: Record<string, string>;
};

/** Runs `command args` in the project folder, as an operator does, with no registry to reach. */
function runIn(command: string, args: string[], env: Record<string, string>) {
  return new Promise<{ code: number | null; stdout: string; stderr: string; error?: Error }>((resolve) => {
    const child = spawn(command, args, {
      cwd: ROOT,
      // --offline: the bin is the project's own; npm must not fetch anything to find it.
      env: { ...env, HOME: process.env.HOME ?? '', npm_config_offline: 'true', npm_config_update_notifier: 'false' },
      timeout: 120_000,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', (error) => resolve({ code: null, stdout, stderr, error }));
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

async function migratedEnv(t: TestContext) {
  const env = childEnv(t);
  const migrated = await runCli(['migrate'], env, 60_000);
  assert.equal(migrated.code, 0, migrated.stderr);
  return env;
}

test('npx petstore keys create prints the key alone on standard output', { timeout: 180_000 }, async (t) => {
  const env = await migratedEnv(t);
  const run = await runIn('npx', ['petstore', 'keys', 'create', '--name', 'ci'], env);
  if (run.error) return t.skip(`npx cannot be run here (${run.error.message}): SKIPPED`);
  assert.equal(run.code, 0, run.stderr);
  // What KEY=$(npx petstore keys create …) captures, newline aside.
  assert.match(run.stdout, /^psk_[A-Za-z0-9_-]{43}\n$/);
  assert.match(run.stderr, /shown only this once/);
  const listed = await runCli(['keys', 'list', '--json'], env, 60_000);
  assert.equal(JSON.parse(listed.stdout).hint, `${run.stdout.slice(0, 10)}…`, 'the key went into PETSTORE_DB');
});

test('npx petstore on a database that does not exist prints nothing on standard output and fails', async (t) => {
  const env = childEnv(t);
  const run = await runIn('npx', ['petstore', 'keys', 'create', '--name', 'ci'], env);
  if (run.error) return t.skip(`npx cannot be run here (${run.error.message}): SKIPPED`);
  assert.equal(run.code, 2, run.stderr);
  assert.equal(run.stdout, '');
  assert.match(run.stderr, /^petstore: the SQLite database .* \(PETSTORE_DB\) does not exist;/m);
});

test(
  'npm run --silent petstore prints the key alone; without --silent npm adds its own lines to standard output',
  { skip: scripts.petstore ? false : 'package.json has no petstore script: SKIPPED', timeout: 180_000 },
  async (t) => {
    const env = await migratedEnv(t);
    // --ignore-scripts: no build first (the suite has just built the service).
    const silent = await runIn(
      'npm',
      ['run', '--silent', '--ignore-scripts', 'petstore', '--', 'keys', 'create', '--name', 'a'],
      env,
    );
    if (silent.error) return t.skip(`npm cannot be run here (${silent.error.message}): SKIPPED`);
    assert.equal(silent.code, 0, silent.stderr);
    assert.match(silent.stdout.trimEnd(), KEY);
    assert.equal(silent.stdout.split('\n').length, 2, silent.stdout);
    // The reason the docs write --silent: npm's "> petstore@… petstore" banner goes to stdout.
    const loud = await runIn(
      'npm',
      ['run', '--ignore-scripts', 'petstore', '--', 'keys', 'create', '--name', 'b'],
      env,
    );
    assert.equal(loud.code, 0, loud.stderr);
    assert.match(loud.stdout, /^> petstore@/m);
  },
);
