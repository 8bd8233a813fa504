import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { parseDuration, parseInstant } from '../src/cli/args.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, runCli, startServer } from './process.js';

// The commands run in process (runKeys) through the output and store the command line injects;
// processes only where only they show it: a running server, and two commands racing.
const KEY = /^psk_[A-Za-z0-9_-]{43}$/;
const HOUR = 3_600_000;

/** An environment whose database has been made and migrated, as `petstore migrate` makes it. */
async function migratedEnv(t: TestContext) {
  const env = childEnv(t);
  await migrateDatabase(env);
  return env;
}

interface Listed {
  id: number;
  name: string;
  scopes: string[];
  createdAt: string;
  expiresAt: string | null;
  state: 'active' | 'expired' | 'revoked';
  lastUsedAt: string | null;
  lastDeprecatedUseAt: string | null;
  revokedAt: string | null;
  replacedBy: number | null;
}

async function list(env: Record<string, string>): Promise<Listed[]> {
  const { code, stdout, stderr } = await runKeys(['list', '--json'], env);
  assert.equal(code, 0, stderr);
  return stdout
    .trim()
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as Listed);
}

async function create(env: Record<string, string>, ...args: string[]) {
  const { code, stdout, stderr } = await runKeys(['create', '--json', ...args], env);
  assert.equal(code, 0, stderr);
  return JSON.parse(stdout) as { id: number; key: string; scopes: string[]; expiresAt: string | null };
}

test('keys create --scope and --expires-in issue a key with those scopes and that expiry', async (t) => {
  const env = await migratedEnv(t);
  const before = Date.now();
  const created = await create(env, '--name', 'dashboard', '--scope', 'pets:read', '--expires-in', '90d');
  assert.match(created.key, KEY);
  assert.deepEqual(created.scopes, ['pets:read']);
  const expires = Date.parse(created.expiresAt!);
  assert.ok(expires >= before + 90 * 24 * HOUR && expires <= Date.now() + 90 * 24 * HOUR);
  const at = await create(
    env,
    '--name',
    'until',
    '--scope',
    'metrics:read',
    '--scope',
    'pets:read',
    '--expires-at',
    '2099-01-02T03:04:05+01:00',
  );
  assert.deepEqual(at.scopes, ['pets:read', 'metrics:read']);
  assert.equal(at.expiresAt, '2099-01-02T02:04:05.000Z');
  const all = await create(env, '--name', 'all');
  assert.deepEqual([all.scopes, all.expiresAt], [['pets:read', 'pets:write', 'metrics:read'], null]);
});

test('a bad scope, duration or instant is a usage error (exit 2) that changes nothing', async (t) => {
  const env = await migratedEnv(t);
  const { id } = await create(env, '--name', 'kept');
  const before = await list(env);
  const cases = [
    [['keys', 'create', '--name', 'x', '--scope', 'pets:delete'], /unknown scope "pets:delete"/],
    [['keys', 'create', '--name', 'x', '--scope', 'PETS:READ'], /unknown scope/],
    [['keys', 'create', '--name', 'x', '--scope', ''], /unknown scope/],
    [['keys', 'create', '--name', 'x', '--expires-in', '0'], /--expires-in must be a positive/],
    [['keys', 'create', '--name', 'x', '--expires-in', '0d'], /--expires-in must be a positive/],
    [['keys', 'create', '--name', 'x', '--expires-in', '90'], /--expires-in must be/],
    [['keys', 'create', '--name', 'x', '--expires-in', '1y'], /--expires-in must be/],
    [['keys', 'create', '--name', 'x', '--expires-in', '-5d'], /--expires-in/],
    [['keys', 'create', '--name', 'x', '--expires-at', '2020-01-01T00:00:00Z'], /not in the future/],
    [['keys', 'create', '--name', 'x', '--expires-at', '2099-02-30T00:00:00Z'], /RFC 3339/],
    [['keys', 'create', '--name', 'x', '--expires-at', 'tomorrow'], /RFC 3339/],
    [['keys', 'create', '--name', 'x', '--expires-in', '1d', '--expires-at', '2099-01-01T00:00:00Z'], /not both/],
    [['keys', 'roll', String(id), '--grace', '-1h'], /--grace/],
    [['keys', 'roll', String(id), '--grace', '1y'], /--grace must be 0 or/],
    [['keys', 'roll', String(id), '--grace', '9999999d'], /before the year 10000/],
    [['keys', 'create', '--name', 'x', '--expires-in', '9999999d'], /before the year 10000/],
    [['keys', 'create', '--name', 'x', '--expires-at', '9999-12-31T23:59:59.5Z'], /before the year 10000/],
    [['keys', 'roll', String(id), '--expires-in', '0'], /--expires-in/],
    [['keys', 'roll', 'abc'], /numeric id/],
    [['keys', 'roll'], /keys roll needs one id/],
    [['keys', 'toString'], /unknown command: keys toString\n\nUsage: petstore keys </],
  ] as const;
  for (const [args, message] of cases) {
    const { code, stdout, stderr } = await runKeys(args.slice(1), env);
    assert.equal(code, 2, `${args.join(' ')}: ${stderr}`);
    assert.match(stderr, message, args.join(' '));
    assert.match(stderr, /\n\nUsage: petstore keys( (create|roll))? /, args.join(' '));
    assert.equal(stdout, '', 'no key printed');
  }
  assert.deepEqual(await list(env), before);
});

test('keys roll prints a successor once; both keys work through the grace; a second roll is refused', async (t) => {
  const env = await migratedEnv(t);
  const old = await create(env, '--name', 'ci', '--scope', 'pets:read');
  const rolled = await runKeys(['roll', String(old.id), '--grace', '1h'], env);
  assert.equal(rolled.code, 0, rolled.stderr);
  const successor = rolled.stdout.trim();
  assert.match(successor, KEY);
  assert.match(rolled.stderr, /shown only this once/);
  const [listedOld, listedNew] = await list(env);
  assert.equal(listedOld!.replacedBy, listedNew!.id);
  assert.equal(listedOld!.state, 'active');
  assert.ok(Math.abs(Date.parse(listedOld!.expiresAt!) - (Date.now() + HOUR)) < 60_000);
  assert.deepEqual([listedNew!.name, listedNew!.scopes, listedNew!.expiresAt], ['ci', ['pets:read'], null]);

  const server = await startServer(t, env);
  for (const key of [old.key, successor]) {
    const response = await fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(response.status, 200);
  }
  const again = await runKeys(['roll', String(old.id)], env);
  assert.equal(again.code, 1);
  assert.match(again.stderr, new RegExp(`already rolled: key ${listedNew!.id} replaces it`));
  assert.equal(again.stdout, '');
  assert.equal((await list(env)).length, 2, 'no second successor');
});

test('keys roll --grace 0 ends the old key at once; a revoked or unknown key cannot be rolled', async (t) => {
  const env = await migratedEnv(t);
  const old = await create(env, '--name', 'leaked', '--expires-in', '30d');
  const rolled = await runKeys(['roll', String(old.id), '--grace', '0', '--json'], env);
  assert.equal(rolled.code, 0, rolled.stderr);
  const successor = JSON.parse(rolled.stdout) as { id: number; key: string; expiresAt: string; replaces: number };
  assert.equal(successor.replaces, old.id);
  // The successor lives as long as the old key was issued for.
  assert.ok(Math.abs(Date.parse(successor.expiresAt) - (Date.now() + 30 * 24 * HOUR)) < 60_000);
  const server = await startServer(t, env);
  const get = (key: string) => fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal((await get(old.key)).status, 401);
  assert.equal((await get(successor.key)).status, 200);
  assert.equal((await list(env))[0]!.state, 'expired');

  const revoked = await create(env, '--name', 'revoked');
  assert.equal((await runKeys(['revoke', String(revoked.id)], env)).code, 0);
  const before = await list(env);
  const refused = await runKeys(['roll', String(revoked.id)], env);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /is revoked and cannot be rolled/);
  const expired = await runKeys(['roll', String(old.id)], env);
  assert.equal(expired.code, 1);
  const unknown = await runKeys(['roll', '999'], env);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /No key has id 999/);
  assert.deepEqual(await list(env), before);
});

test('two keys roll commands of one key at once: one wins, the other is told so', async (t) => {
  const env = await migratedEnv(t);
  const { id } = await create(env, '--name', 'contended');
  const results = await Promise.all([1, 2].map(() => runCli(['keys', 'roll', String(id)], env)));
  assert.deepEqual(results.map((result) => result.code).sort(), [0, 1], results.map((r) => r.stderr).join('\n'));
  assert.match(results.find((result) => result.code === 1)!.stderr, /already rolled/);
  assert.equal((await list(env)).length, 2);
});

test('keys list shows scopes, expiry, state and the last use to the minute', async (t) => {
  const env = await migratedEnv(t);
  const used = await create(env, '--name', 'used', '--scope', 'pets:read');
  await create(env, '--name', 'unused', '--scope', 'metrics:read');
  const soon = await create(env, '--name', 'soon', '--expires-in', '1s');
  const gone = await create(env, '--name', 'gone');
  await runKeys(['revoke', String(gone.id)], env);
  const server = await startServer(t, env);
  const before = Date.now();
  for (let i = 0; i < 5; i++) {
    const response = await fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${used.key}` } });
    assert.equal(response.status, 200);
  }
  // SIGTERM: the service writes the uses it holds before it exits.
  server.child.kill('SIGTERM');
  assert.equal((await server.exited).code, 0);
  while (Date.now() < Date.parse(soon.expiresAt!)) await sleep(50);
  const keys = await list(env);
  const byName = Object.fromEntries(keys.map((key) => [key.name, key]));
  assert.deepEqual(
    keys.map((key) => [key.name, key.state]),
    [
      ['used', 'active'],
      ['unused', 'active'],
      ['soon', 'expired'],
      ['gone', 'revoked'],
    ],
  );
  const lastUsed = byName.used!.lastUsedAt!;
  assert.match(lastUsed, /T[0-9]{2}:[0-9]{2}:00\.000Z$/, 'to the minute');
  assert.ok(Date.parse(lastUsed) <= Date.now() && Date.parse(lastUsed) > before - 60_000);
  assert.equal(byName.unused!.lastUsedAt, null);
  assert.equal(byName.used!.lastDeprecatedUseAt, null, 'listPets is not a deprecated use');
  assert.deepEqual(byName.unused!.scopes, ['metrics:read']);

  const table = await runKeys(['list'], env);
  const [header, first] = table.stdout.split('\n');
  assert.equal(header, 'ID\tNAME\tKEY\tSCOPES\tCREATED\tEXPIRES\tSTATE\tLAST USED\tLAST DEPRECATED USE');
  assert.match(first!, /\tpets:read\t.*\tactive\t[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}Z\t-$/);
  assert.ok(!table.stdout.includes(used.key), 'never a key');
});

test('durations and RFC 3339 instants are read strictly', () => {
  assert.equal(parseDuration('90d'), 90 * 24 * HOUR);
  assert.equal(parseDuration('45s'), 45_000);
  assert.equal(parseDuration('0'), undefined);
  assert.equal(parseDuration('0', { zero: true }), 0);
  assert.equal(parseDuration('0h', { zero: true }), 0);
  for (const bad of ['', 'd', '1.5h', '1 h', '1H', '01d', '+1d', '1w', '99999999d']) {
    assert.equal(parseDuration(bad, { zero: true }), undefined, bad);
  }
  assert.equal(parseInstant('2027-03-01T00:00:00Z')?.toISOString(), '2027-03-01T00:00:00.000Z');
  assert.equal(parseInstant('2027-03-01t01:30:00.25+01:30')?.toISOString(), '2027-03-01T00:00:00.250Z');
  for (const bad of [
    '2027-03-01',
    '2027-03-01T00:00Z',
    '2027-03-01T00:00:00',
    '2027-02-29T00:00:00Z',
    '2027-13-01T00:00:00Z',
    '2027-03-01T24:00:00Z',
    '2027-03-01T00:00:00+24:00',
    '2027-03-01 00:00:00Z',
  ]) {
    assert.equal(parseInstant(bad), undefined, bad);
  }
});
