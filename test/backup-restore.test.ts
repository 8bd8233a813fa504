import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { migrateDatabase, runDatabase } from './in-process.js';
import { tempFolder } from './helpers.js';
import { childEnv, runCli, startServer, type Server } from './process.js';

const KEY_LINE = /^ {4}(psk_[A-Za-z0-9_-]{43})$/m;

/** A service on a fresh SQLite file, its first key, and a way to create pets with it. */
async function serveFresh(t: TestContext, env: Record<string, string>) {
  const server = await startServer(t, env);
  const [, key] = await server.waitForOutput(KEY_LINE);
  return { server, key: key! };
}

async function createPet(server: Server, key: string, name: string): Promise<number> {
  const response = await fetch(`${server.url}/v1/pets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, categoryId: 1 }),
  });
  assert.equal(response.status, 201, await response.clone().text());
  return ((await response.json()) as { id: number }).id;
}

/** Every pet id the service lists, following its rel="next" links. */
async function listedIds(server: Server, key: string): Promise<Set<number>> {
  const ids = new Set<number>();
  let url: string | undefined = `${server.url}/v1/pets?limit=100`;
  for (let page = 0; url && page < 1000; page++) {
    const response: Response = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(response.status, 200);
    for (const pet of (await response.json()) as { id: number }[]) ids.add(pet.id);
    const next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1];
    url = next && new URL(next, server.url).href;
  }
  return ids;
}

async function stop(server: Server) {
  server.child.kill('SIGTERM');
  assert.equal((await server.exited).code, 0);
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

/** The lines of a command's standard error that are its refusal (`petstore: …`). */
const refusals = (stderr: string) => stderr.split('\n').filter((line) => line.startsWith('petstore:'));

test('a backup taken under a write load holds every pet acknowledged before it started, and restores into a service that serves them, over a killed one', async (t) => {
  const env = childEnv(t, { PETSTORE_RATE_LIMIT: 'off' });
  const { server, key } = await serveFresh(t, env);
  const acknowledged: number[] = [];
  let writing = true;
  // Four writers, each creating pets one after another until told to stop (bounded in count).
  const writers = [0, 1, 2, 3].map(async (writer) => {
    for (let i = 0; writing && i < 5000; i++) acknowledged.push(await createPet(server, key, `load ${writer} ${i}`));
  });
  while (acknowledged.length < 200) await new Promise((resolve) => setTimeout(resolve, 10));
  const before = [...acknowledged];
  const file = join(dirname(env.PETSTORE_DB!), 'backup.db');
  const backup = await runCli(['backup', file], env);
  const during = acknowledged.length;
  writing = false;
  await Promise.all(writers);
  assert.equal(backup.code, 0, backup.stderr);
  assert.ok(acknowledged.length > before.length, 'the service took writes while the backup ran');

  const [, path, count] = /^Wrote (.+): ([0-9]+) pets\.$/.exec(backup.stdout.trim()) ?? [];
  assert.equal(path, file, backup.stdout);
  assert.ok(Number(count) >= before.length && Number(count) <= during, `${count} pets`);
  assert.equal(statSync(file).mode & 0o777, 0o600, 'readable by its owner alone');
  const copy = new Database(file, { readonly: true });
  const copied = new Set(copy.prepare('SELECT id FROM pets').pluck().all() as number[]);
  copy.close();
  assert.equal(copied.size, Number(count));
  for (const id of before) assert.ok(copied.has(id), `pet ${id}, acknowledged before the backup, is in it`);

  // Restored over the database it came from, which holds more pets now, some only in the -wal
  // file a killed service leaves: the service then serves the copy, and nothing of that log.
  server.child.kill('SIGKILL');
  await server.exited;
  assert.ok(existsSync(`${env.PETSTORE_DB}-wal`), 'the killed service left its write-ahead log');
  const restored = await runCli(['restore', file], env);
  assert.equal(restored.code, 0, restored.stderr);
  assert.match(restored.stdout, new RegExp(`\\(${count} pets\\) into the SQLite database`));
  const again = await startServer(t, env);
  assert.deepEqual(await listedIds(again, key), copied);
  const fetched = await fetch(`${again.url}/v1/pets/${before[0]}`, { headers: { authorization: `Bearer ${key}` } });
  assert.equal(fetched.status, 200);
  // Ids are never reused: the next pet comes after every id the database ever gave out.
  const next = await createPet(again, key, 'after the restore');
  assert.ok(next > Math.max(...copied));
  await stop(again);
});

test('backup refuses an existing file unless --force, and writes it readable by its owner alone', async (t) => {
  const env = childEnv(t);
  await migrateDatabase(env);
  const file = join(dirname(env.PETSTORE_DB!), 'existing.db');
  writeFileSync(file, 'keep me', { mode: 0o644 });
  const refused = await runCli(['backup', file], env);
  assert.equal(refused.code, 1);
  assert.deepEqual(refusals(refused.stderr), [`petstore: ${file} already exists; add --force to replace it.`]);
  assert.equal(readFileSync(file, 'utf8'), 'keep me');
  const forced = await runCli(['backup', file, '--force'], env);
  assert.equal(forced.code, 0, forced.stderr);
  assert.equal(forced.stdout, `Wrote ${file}: 0 pets.\n`);
  assert.equal(statSync(file).mode & 0o777, 0o600);
  assert.deepEqual(
    readdirSync(dirname(file)).filter((name) => name.startsWith('.')),
    [],
    'no temporary folder or file is left behind',
  );
  const usage = await runCli(['backup'], env);
  assert.equal(usage.code, 2);
  assert.match(usage.stderr, /Usage: petstore backup <file>/);
});

test('a bad command line of backup, restore or migrate status is one line, its controls shown as U+ codes, then the usage', async (t) => {
  const db = join(tempFolder(t), 'petstore.db');
  for (const argv of [
    ['migrate', 'status', 'x\u001b[31mred\nline'],
    ['backup', '--x\u001b[31mred\nline'],
  ]) {
    const { code, err } = await runDatabase(argv, db);
    assert.equal(code, 2);
    const [message, usage] = err.join('\n').split('\n\n');
    assert.match(message!, /^petstore: [^\n]*$/);
    assert.ok(!message!.includes('\u001b'), message);
    assert.match(usage!, new RegExp(`^Usage: petstore ${argv[0]}`));
  }
  const { err } = await runDatabase(['migrate', 'status', 'x\u001b[31mred\nline'], db);
  assert.match(err[0]!, /^petstore: unexpected argument: xU\+001B\[31mredU\+000Aline\n\n/);
});

test('backup and restore on PostgreSQL refuse with one line that names pg_dump or pg_restore', async (t) => {
  const env = childEnv(t, { DATABASE_URL: 'postgres://petstore@127.0.0.1:1/none' });
  const file = join(dirname(env.PETSTORE_DB!), 'copy.db');
  for (const [command, tool] of [
    ['backup', 'pg_dump'],
    ['restore', 'pg_restore'],
  ] as const) {
    const { code, stdout, stderr } = await runCli([command, file], env);
    assert.equal(code, 2);
    assert.equal(stdout, '');
    assert.equal(stderr.trim().split('\n').length, 1, stderr);
    assert.match(stderr, new RegExp(`^petstore: ${command} works on a SQLite database; .*use ${tool}`));
  }
});

/** A petstore database with `n` pets in it (long names: many pages), written around the service. */
async function populated(t: TestContext, n: number) {
  const env = childEnv(t);
  await migrateDatabase(env);
  const db = new Database(env.PETSTORE_DB!);
  const insert = db.prepare("INSERT INTO pets (name, category_id, status) VALUES (?, 1, 'available')");
  db.transaction(() => {
    for (let i = 0; i < n; i++) insert.run(`pet ${i} `.padEnd(200, 'x'));
  })();
  db.close();
  return env;
}

test('restore refuses a damaged file, a foreign file and a database in use, leaving the current one as it was', async (t) => {
  const env = await populated(t, 2000);
  const folder = dirname(env.PETSTORE_DB!);
  const good = join(folder, 'good.db');
  assert.equal((await runCli(['backup', good], env)).code, 0);

  const damaged = join(folder, 'damaged.db');
  const bytes = readFileSync(good);
  // Pages in the middle of the file, which the pets table fills, overwritten.
  const middle = Math.floor(bytes.length / 2 / 4096) * 4096;
  bytes.fill(0x55, middle, middle + 3 * 4096);
  writeFileSync(damaged, bytes);
  const foreign = join(folder, 'notes.txt');
  writeFileSync(foreign, 'not a database at all\n'.repeat(300));
  const otherApp = join(folder, 'other.db');
  const other = new Database(otherApp);
  other.exec("CREATE TABLE todo (item TEXT); INSERT INTO todo VALUES ('milk')");
  other.close();

  const current = sha256(env.PETSTORE_DB!);
  const cases = [
    [damaged, new RegExp(`^petstore: ${damaged} is damaged: `)],
    [foreign, new RegExp(`^petstore: ${foreign} is not a SQLite database\\.$`)],
    [otherApp, new RegExp(`^petstore: ${otherApp} is a SQLite database but not a petstore one`)],
    [join(folder, 'missing.db'), /does not exist/],
  ] as const;
  for (const [file, reason] of cases) {
    const { code, stderr } = await runCli(['restore', file], env);
    assert.equal(code, 1, `${file}: ${stderr}`);
    const lines = refusals(stderr);
    assert.equal(lines.length, 1, stderr);
    assert.match(lines[0]!, reason);
    assert.equal(sha256(env.PETSTORE_DB!), current, 'the current database is left as it was');
  }

  const server = await startServer(t, env);
  const inUse = await runCli(['restore', good], env);
  assert.equal(inUse.code, 1, inUse.stderr);
  const lines = refusals(inUse.stderr);
  assert.equal(lines.length, 1, inUse.stderr);
  assert.match(lines[0]!, /is in use: another process has it open \(SQLite refused this process an exclusive lock/);
  const health = await fetch(`${server.url}/readyz`);
  assert.equal(health.status, 200, 'the service goes on with its database');
  await stop(server);
  const db = new Database(env.PETSTORE_DB!, { readonly: true });
  assert.equal(db.prepare('SELECT count(*) FROM pets').pluck().get(), 2000);
  db.close();
  assert.deepEqual(
    readdirSync(folder).filter((name) => name.startsWith('.')),
    [],
    'no temporary folder or file is left behind',
  );
});

test('backup, restore and migrate status each have their own --help, which needs no valid setting', async (t) => {
  const env = childEnv(t, { PORT: 'eighty' });
  for (const [args, usage] of [
    [['backup', '--help'], /^Usage: petstore backup <file> \[--force\]\n/],
    [['help', 'restore'], /^Usage: petstore restore <file>\n/],
    [['migrate', 'status', '--help'], /^Usage: petstore migrate status \[--json\]\n/],
  ] as const) {
    const { code, stdout } = await runCli([...args], env);
    assert.equal(code, 0, args.join(' '));
    assert.match(stdout, usage, args.join(' '));
  }
  const general = await runCli(['--help'], env);
  for (const command of ['migrate status', 'backup <file>', 'restore <file>']) {
    assert.ok(general.stdout.includes(`  ${command}`), command);
  }
});
