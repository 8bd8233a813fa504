import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { migrateDatabase, runKeys } from './in-process.js';
import { askedHelp } from '../src/cli/help.js';
import { childEnv, runCli, startServer } from './process.js';

const KEY = /^psk_[A-Za-z0-9_-]{43}$/;
const { version } = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
  version: string;
};

/** A child environment whose database has been made and migrated, as `petstore migrate` makes it. */
async function migratedEnv(t: TestContext, extra: Record<string, string> = {}) {
  const env = childEnv(t, extra);
  await migrateDatabase(env);
  return env;
}

test('keys create prints the new key alone on standard output', async (t) => {
  const env = await migratedEnv(t);
  const { code, stdout, stderr } = await runCli(['keys', 'create', '--name', 'ci'], env);
  assert.equal(code, 0, stderr);
  assert.match(stdout.trim(), KEY);
  assert.match(stderr, /shown only this once/);
});

test('keys create --json prints one JSON line a script can parse', async (t) => {
  const env = await migratedEnv(t);
  const { code, stdout } = await runKeys(['create', '--name', 'deploy bot', '--json'], env);
  assert.equal(code, 0);
  const created = JSON.parse(stdout);
  assert.deepEqual(Object.keys(created), ['id', 'name', 'key', 'scopes', 'createdAt', 'expiresAt']);
  assert.deepEqual(created.scopes, ['pets:read', 'pets:write', 'metrics:read']);
  assert.equal(created.expiresAt, null);
  assert.equal(created.name, 'deploy bot');
  assert.match(created.key, KEY);
});

test('keys list shows names and hints but never a key', async (t) => {
  const env = await migratedEnv(t);
  const created = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout);
  const { code, stdout } = await runKeys(['list'], env);
  assert.equal(code, 0);
  assert.match(stdout, /\bci\b/);
  assert.ok(stdout.includes(created.key.slice(0, 10)), 'the hint is shown');
  assert.ok(!stdout.includes(created.key), 'the key is not shown');
  assert.ok(!stdout.includes(created.key.slice(10)), 'no secret part is shown');
});

test('keys revoke marks the key revoked, and refuses an unknown id', async (t) => {
  const env = await migratedEnv(t);
  const created = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout);
  assert.equal((await runKeys(['revoke', String(created.id)], env)).code, 0);
  const listed = JSON.parse((await runKeys(['list', '--json'], env)).stdout);
  assert.notEqual(listed.revokedAt, null);
  const again = await runKeys(['revoke', String(created.id)], env);
  assert.equal(again.code, 1);
  assert.match(again.stderr, /No active key has id/);
});

test('a bad command or argument prints usage and exits 2', async (t) => {
  const env = childEnv(t);
  for (const args of [[], ['fly'], ['keys', 'create'], ['keys', 'revoke', 'abc'], ['keys', 'list', '--bogus']]) {
    const { code, stderr } = await runCli(args, env);
    assert.equal(code, 2, args.join(' '));
    assert.match(stderr, /Usage: petstore/, args.join(' '));
  }
});

test('a name every object has is no command: its help is the general usage, nothing of Object.prototype', () => {
  const general = askedHelp([], true);
  assert.match(general!, /^Usage: petstore <command>/);
  for (const words of [['toString'], ['constructor'], ['migrate', 'toString'], ['help', '__proto__']]) {
    const help = words[0] === 'help' ? askedHelp(words, false) : askedHelp(words, true);
    assert.equal(help, words[0] === 'migrate' ? askedHelp(['migrate'], true) : general, words.join(' '));
  }
});

test('--help lists the commands and every setting', async (t) => {
  const { code, stdout } = await runCli(['--help'], childEnv(t));
  assert.equal(code, 0);
  for (const word of ['serve', 'migrate', 'keys create', 'PORT', 'PETSTORE_DB', 'PETSTORE_PUBLIC_URL']) {
    assert.ok(stdout.includes(word), word);
  }
});

test('every command has its own --help, which needs no valid setting', async (t) => {
  // A bad setting would stop any command that ran: help must not read them.
  const env = childEnv(t, { PORT: 'eighty' });
  const serve = [/^Usage: petstore serve\n/, /PETSTORE_PUBLIC_URL/];
  const migrate = [/^Usage: petstore migrate\n/, /DATABASE_URL/];
  const keys = [/^Usage: petstore keys <create\|list\|revoke\|roll>/, /keys revoke <id>/, /keys roll <id>/];
  const create = [
    /^Usage: petstore keys create --name <name> \[--scope <scope>\]\.\.\. /,
    /"createdAt"/,
    /--expires-in/,
  ];
  const list = [/^Usage: petstore keys list \[--json\]\n/, /"revokedAt"/, /"lastUsedAt"/];
  const revoke = [/^Usage: petstore keys revoke <id>\n/, /1 no active key has this id/];
  const roll = [/^Usage: petstore keys roll <id> \[--grace <duration>\]/, /Default: 24h/];
  // The command's own words (serve, migrate, help) in a process; the keys commands' in process.
  const cases: [string[], RegExp[]][] = [
    [['serve', '--help'], serve],
    [['migrate', '--help'], migrate],
    [['help', 'keys', 'roll'], roll],
    [['help', 'keys', 'create'], create],
    [['keys', '--help'], keys],
    [['keys', 'create', '--help'], create],
    [['keys', 'list', '--help'], list],
    [['keys', 'revoke', '--help'], revoke],
    [['keys', 'roll', '--help'], roll],
    [['keys', 'list', '-h'], list],
  ];
  const results = await Promise.all(
    cases.map(([args]) => (args[0] === 'keys' ? runKeys(args.slice(1), env) : runCli(args, env, 60_000))),
  );
  for (const [i, { code, stdout, stderr }] of results.entries()) {
    const [args, patterns] = cases[i]!;
    assert.equal(code, 0, `${args.join(' ')}: ${stderr}`);
    for (const pattern of patterns) assert.match(stdout, pattern, args.join(' '));
  }
});

test("a bad subcommand line prints that subcommand's usage", async (t) => {
  const env = childEnv(t);
  const create = await runKeys(['create', '--name', 'x', '--bogus'], env);
  assert.equal(create.code, 2);
  assert.match(create.stderr, /^petstore: .*--bogus.*\n\nUsage: petstore keys create --name/);
  const revoke = await runKeys(['revoke', 'abc'], env);
  assert.match(revoke.stderr, /\n\nUsage: petstore keys revoke <id>/);
  const keys = await runKeys(['rotate'], env);
  assert.match(keys.stderr, /^petstore: unknown command: keys rotate\n\nUsage: petstore keys </);
});

test('an unknown command is one line, its controls shown as U+ codes, then the usage, and exit 2', async (t) => {
  const { code, stdout, stderr } = await runCli(['x\u001b[31mred\nline'], childEnv(t));
  assert.equal(code, 2);
  assert.equal(stdout, '');
  assert.match(stderr, /^petstore: unknown command: xU\+001B\[31mredU\+000Aline\n\nUsage: petstore <command>/);
});

test('keys create --json keeps standard output to the one JSON line, the notes on standard error', async (t) => {
  const env = await migratedEnv(t);
  const { code, stdout, stderr } = await runCli(['keys', 'create', '--name', 'ci', '--json'], env);
  assert.equal(code, 0);
  assert.equal(stdout.split('\n').length, 2, stdout);
  assert.ok(stdout.endsWith('}\n'));
  assert.match(JSON.parse(stdout).key, KEY);
  assert.equal(stderr, `Using the SQLite database ${env.PETSTORE_DB} (PETSTORE_DB).\n`);
});

test('a bad setting stops start-up with a message naming the variable', async (t) => {
  const { code, stderr } = await runCli(['serve'], childEnv(t, { PORT: 'eighty' }));
  assert.equal(code, 2);
  assert.match(stderr, /^petstore: PORT must be an integer from 0 to 65535 \(got "eighty"\)/);
});

test('migrate applies the migrations once, one line on standard error for each as it is applied', async (t) => {
  const env = childEnv(t);
  const first = await runCli(['migrate'], env);
  assert.equal(first.code, 0);
  assert.equal(first.stdout, '');
  // Every migration this version ships, in order, one line each.
  const names = readdirSync(new URL('../migrations/sqlite/', import.meta.url))
    .filter((file) => file.endsWith('.sql'))
    .sort()
    .map((file) => file.slice(0, -'.sql'.length));
  assert.ok(names.length >= 5);
  assert.match(
    first.stderr,
    new RegExp(
      `^Created the SQLite database ${env.PETSTORE_DB} \\(PETSTORE_DB\\), which did not exist\\.\n` +
        names.map((name) => `Applied ${name} \\([0-9]+ ms\\)\\.\n`).join('') +
        `Applied ${names.length} migrations; the database is up to date\\.\n$`,
    ),
  );
  const second = await runCli(['migrate'], env);
  assert.equal(
    second.stderr,
    `Using the SQLite database ${env.PETSTORE_DB} (PETSTORE_DB).\nThe database is up to date.\n`,
  );
});

test('first start with no key prints one that works; the next start prints none', async (t) => {
  const env = childEnv(t);
  const first = await startServer(t, env);
  const [, key] = await first.waitForOutput(/^ {4}(psk_[A-Za-z0-9_-]{43})$/m);
  const response = await fetch(`${first.url}/v1/pets`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(response.status, 200);
  // The start line names the release (package.json); the key command names this very database.
  await first.waitForOutput(/^More keys, in .+:\n {4}.+\n/m);
  const serving = `Serving ${first.url}/v1 from the SQLite database ${env.PETSTORE_DB} (PETSTORE_DB); petstore ${version}, Node.js ${process.versions.node}.`;
  assert.ok(first.stderr().includes(`${serving}\n`), first.stderr());
  assert.ok(
    first.stderr().includes(`\n    PETSTORE_DB=${env.PETSTORE_DB} npx petstore keys create --name <name>\n`),
    first.stderr(),
  );
  first.child.kill('SIGTERM');
  assert.equal((await first.exited).code, 0);

  const second = await startServer(t, env);
  second.child.kill('SIGTERM');
  await second.exited;
  assert.doesNotMatch(second.stderr(), /psk_/);
});

test('a key revoked from the command line is refused by a running server within one second', async (t) => {
  const env = await migratedEnv(t);
  const created = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout);
  const server = await startServer(t, env);
  const get = () => fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${created.key}` } });
  assert.equal((await get()).status, 200);
  await runKeys(['revoke', String(created.id)], env);
  // docs/keys.md#how-keys-work: refused within one second (the server may remember an active key for less).
  const revokedAt = Date.now();
  let refused = await get();
  while (refused.status === 200 && Date.now() - revokedAt < 1000) {
    await sleep(50);
    refused = await get();
  }
  assert.ok(Date.now() - revokedAt <= 1000, 'refused within one second');
  assert.equal(refused.status, 401);
  assert.equal(refused.headers.get('www-authenticate'), 'Bearer realm="petstore", error="invalid_token"');
});

test('serve never logs a key', async (t) => {
  const env = await migratedEnv(t, { LOG_LEVEL: 'trace' });
  const created = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout);
  const server = await startServer(t, env);
  let logs = '';
  server.child.stdout!.on('data', (chunk) => (logs += chunk));
  await fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${created.key}` } });
  await fetch(`${server.url}/v1/pets`, { headers: { authorization: 'Bearer psk_wrong' } });
  server.child.kill('SIGTERM');
  await server.exited;
  assert.match(logs, /request completed/);
  assert.ok(!logs.includes(created.key.slice(4)), 'no key in the logs');
  assert.ok(!logs.includes('psk_wrong'), 'no refused token in the logs');
});
