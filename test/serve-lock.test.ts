import assert from 'node:assert/strict';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { holdServeLock, ServedElsewhere, serveLockPath } from '../src/store/serve-lock.js';
import { tempFolder } from './helpers.js';
import { childEnv, runCli, startServer } from './process.js';

test('a SQLite file is held by one holder at a time, named to the next, and free again once let go', (t) => {
  const path = join(tempFolder(t), 'petstore.db');
  const startedAt = new Date('2026-11-30T09:12:44.051Z');
  const letGo = holdServeLock(path, startedAt);
  assert.throws(
    () => holdServeLock(path),
    (error: unknown) => {
      assert.ok(error instanceof ServedElsewhere);
      assert.deepEqual(error.holder, { pid: process.pid, host: hostname(), startedAt: startedAt.toISOString() });
      assert.equal(
        error.message,
        `another petstore serve is serving it (pid ${process.pid} on ${hostname()}, started 2026-11-30T09:12:44.051Z)`,
      );
      return true;
    },
  );
  letGo();
  const again = holdServeLock(path);
  again();
  assert.ok(serveLockPath(path).endsWith('petstore.db.lock'));
});

test('a second petstore serve on a SQLite file refuses in one line naming the first, and a kill -9 leaves nothing in the way', async (t) => {
  const env = childEnv(t);
  const first = await startServer(t, env);
  const second = await runCli(['serve'], env);
  assert.equal(second.code, 1);
  assert.equal(second.stdout, '');
  const lines = second.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, second.stderr);
  assert.match(
    lines[0]!,
    new RegExp(
      `^petstore: cannot serve the SQLite database ${env.PETSTORE_DB!.replace(/[.]/g, '\\.')} \\(PETSTORE_DB\\): ` +
        `another petstore serve is serving it \\(pid ${first.child.pid} on ${hostname()}, started [0-9T:.-]+Z\\); ` +
        'one process serves a SQLite file',
    ),
  );
  // The first one goes on serving.
  assert.equal((await fetch(`${first.url.replace(/\/v1$/, '')}/healthz`)).status, 200);
  first.child.kill('SIGKILL');
  await first.exited;
  // Its lock file stays behind, its lock does not.
  const third = await startServer(t, env);
  assert.equal((await fetch(`${third.url.replace(/\/v1$/, '')}/healthz`)).status, 200);
  third.child.kill('SIGTERM');
  assert.equal((await third.exited).code, 0);
});
