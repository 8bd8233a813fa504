import assert from 'node:assert/strict';
import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { openSqliteStore } from '../src/store/sqlite.js';

const modeOf = (path: string) => statSync(path).mode & 0o777;

test('the SQLite folder and files are created readable by their owner alone: 0700 and 0600, -wal and -shm too', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'petstore-files-'));
  t.after(() => rmSync(root, { recursive: true, force: true }));
  const dir = join(root, 'data', 'nested');
  const path = join(dir, 'petstore.db');
  // A permissive umask, as a container or a shared host may have: the modes hold anyway.
  const umask = process.umask(0o002);
  t.after(() => void process.umask(umask));
  const store = openSqliteStore(path);
  t.after(() => store.close());
  await store.migrate();
  await store.createPet({ name: 'Rex', categoryId: 1n, status: 'available' });
  assert.equal(modeOf(join(root, 'data')).toString(8), '700');
  assert.equal(modeOf(dir).toString(8), '700');
  for (const file of [path, `${path}-wal`, `${path}-shm`]) assert.equal(modeOf(file).toString(8), '600', file);
});

test('an existing folder and file keep the permissions they were given', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-files-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  chmodSync(dir, 0o750);
  const path = join(dir, 'petstore.db');
  writeFileSync(path, '');
  chmodSync(path, 0o640);
  const store = openSqliteStore(path);
  t.after(() => store.close());
  await store.migrate();
  assert.equal(modeOf(dir).toString(8), '750');
  assert.equal(modeOf(path).toString(8), '640');
});
