import assert from 'node:assert/strict';
import { once } from 'node:events';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  watch,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { Worker } from 'node:worker_threads';
import Database from 'better-sqlite3';
import { readMigrations } from '../src/store/migrations.js';
import { sqliteWithPets, tempFolder } from './helpers.js';
import { runDatabase } from './in-process.js';

const PETS = 300;
const ATTACKER_HASH = Buffer.alloc(32, 0xee);

/** `petstore <argv>` run in process on the SQLite file `db`, with its output collected. */
const petstore = runDatabase;

const folder = (t: TestContext) => tempFolder(t, 'petstore-planted-');

/** The service's database, in WAL mode as the service leaves it, with PETS animals. */
async function liveDatabase(dir: string): Promise<string> {
  mkdirSync(join(dir, 'live'));
  const path = join(dir, 'live', 'petstore.db');
  await sqliteWithPets(path, PETS);
  return path;
}

/**
 * The write-ahead log of another user's petstore database: one pet and a key whose hash they
 * know. SQLite reads such a file found beside any database of the same page size as part of it.
 */
function attackerWal(dir: string): Buffer {
  const db = new Database(join(dir, 'attacker.db'));
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('wal_autocheckpoint = 0');
    db.exec(
      'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL) STRICT',
    );
    for (const migration of readMigrations('sqlite')) db.exec(migration.sql);
    db.exec("INSERT INTO pets (name, category_id, status) VALUES ('planted', 1, 'available')");
    db.prepare("INSERT INTO api_keys (name, hint, hash, created_at) VALUES ('mine', 'psk_ee', ?, '2026-11-01')").run(
      ATTACKER_HASH,
    );
    return readFileSync(join(dir, 'attacker.db-wal'));
  } finally {
    db.close();
  }
}

/** What a backup file holds, read from a copy of its bytes alone, in a folder of its own. */
function contentsOf(t: TestContext, file: string) {
  const scratch = folder(t);
  const copy = join(scratch, 'copy.db');
  copyFileSync(file, copy);
  const header = readFileSync(copy).subarray(18, 20);
  const db = new Database(copy, { readonly: true });
  try {
    return {
      versions: [...header],
      integrity: db.pragma('integrity_check', { simple: true }),
      pets: db.prepare('SELECT count(*) FROM pets').pluck().get(),
      attackerKeys: db.prepare('SELECT count(*) FROM api_keys WHERE hash = ?').pluck().get(ATTACKER_HASH),
    };
  } finally {
    db.close();
  }
}

// Runs in a worker thread, beside the backups: for each new file it sees in the folder or any
// folder below it (the backups' temporary ones included), it creates <file>-wal and
// <file>-journal holding the planted log. Bounded in rounds and time; stops when told.
const PLANTER = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const path = require('node:path');
const { root, wal, stop, maxMs, maxRounds } = workerData;
const flag = new Int32Array(stop);
const seen = new Set();
let planted = 0;
const deadline = Date.now() + maxMs;
for (let round = 0; round < maxRounds && Date.now() < deadline && Atomics.load(flag, 0) === 0; round++) {
  const folders = [root];
  for (let i = 0; i < folders.length && i < 1000; i++) {
    let entries = [];
    try { entries = fs.readdirSync(folders[i], { withFileTypes: true }); } catch {}
    for (const entry of entries) {
      const full = path.join(folders[i], entry.name);
      if (entry.isDirectory()) { folders.push(full); continue; }
      if (/-(wal|journal|shm)$/.test(entry.name) || seen.has(full)) continue;
      seen.add(full);
      for (const suffix of ['-wal', '-journal']) {
        try { fs.writeFileSync(full + suffix, wal, { flag: 'wx' }); planted++; } catch {}
      }
    }
  }
}
parentPort.postMessage(planted);
`;

test('a backup raced by a process planting -wal and -journal files in its folder is intact or refused, never swapped', async (t) => {
  const dir = folder(t);
  const source = await liveDatabase(dir);
  const wal = attackerWal(dir);
  const shared = join(dir, 'shared');
  mkdirSync(shared);
  chmodSync(shared, 0o1777);
  const stop = new SharedArrayBuffer(4);
  const planter = new Worker(PLANTER, {
    eval: true,
    workerData: { root: shared, wal, stop, maxMs: 20_000, maxRounds: 5_000_000 },
  });
  t.after(() => planter.terminate());
  const plantedCount = once(planter, 'message');

  const outcomes = { written: 0, refused: 0 };
  for (let round = 0; round < 30; round++) {
    const target = join(shared, `monday-${round}.db`);
    const { code, out, err } = await petstore(['backup', target], source);
    if (code === 0) {
      outcomes.written++;
      assert.deepEqual(out, [`Wrote ${target}: ${PETS} pets.`]);
      assert.deepEqual(contentsOf(t, target), { versions: [1, 1], integrity: 'ok', pets: PETS, attackerKeys: 0 });
    } else {
      outcomes.refused++;
      assert.equal(code, 1, err.join('\n'));
      assert.equal(err.length, 2, err.join('\n'));
      assert.match(err[1]!, /^petstore: .*(appeared beside|exists beside|was replaced).*only you can write to/);
      assert.ok(!existsSync(target), `${target} is not left behind`);
    }
    const ours = readdirSync(shared).filter((name) => name.startsWith(`.monday-${round}.db.backup-`));
    assert.deepEqual(ours, [], 'no temporary folder is left behind');
  }
  Atomics.store(new Int32Array(stop), 0, 1);
  const [planted] = (await plantedCount) as [number];
  assert.ok(planted > 0, 'the planter planted files');
  assert.equal(outcomes.written + outcomes.refused, 30);
  t.diagnostic(`written ${outcomes.written}, refused ${outcomes.refused}, files planted ${planted}`);
});

test('backup refuses, with nothing written, when a file appears beside its temporary copy', async (t) => {
  const dir = folder(t);
  const source = await liveDatabase(dir);
  const wal = attackerWal(dir);
  const shared = join(dir, 'shared');
  mkdirSync(shared);
  const target = join(shared, 'tuesday.db');
  // Plants <copy>-wal and <copy>-shm in the backup's private folder as soon as the folder
  // appears: only its own user (or root) can. SQLite deletes a -wal beside the empty file the
  // backup starts from; the -shm stays, and the backup does not go on with a file it did not
  // create beside the copy.
  let planted = 0;
  const watcher = watch(shared, (_event, name) => {
    if (!name?.startsWith('.tuesday.db.backup-')) return;
    for (const suffix of ['-wal', '-shm']) {
      try {
        writeFileSync(join(shared, name, `tuesday.db${suffix}`), wal, { flag: 'wx' });
        planted++;
      } catch {
        // The folder is gone already, or the file is there: nothing to plant.
      }
    }
  });
  t.after(() => watcher.close());
  const { code, out, err } = await petstore(['backup', target], source);
  assert.equal(planted, 2, 'the files were planted while the backup ran');
  assert.equal(code, 1, err.join('\n'));
  assert.deepEqual(out, []);
  assert.match(
    err[1]!,
    /^petstore: .*\/\.tuesday\.db\.backup-[^/]+\/tuesday\.db-(wal|shm), which petstore did not create, appeared beside the backup's temporary copy; nothing was written: write backups into a folder that only you can write to/,
  );
  assert.deepEqual(readdirSync(shared), [], 'nothing is left behind');
});

test('backup refuses a -wal, -journal or -shm already beside the file it would write, and leaves it', async (t) => {
  const dir = folder(t);
  const source = await liveDatabase(dir);
  const wal = attackerWal(dir);
  for (const suffix of ['-wal', '-journal', '-shm']) {
    const target = join(dir, `wednesday${suffix.replace('-', '_')}.db`);
    writeFileSync(target + suffix, wal);
    const { code, err } = await petstore(['backup', target], source);
    assert.equal(code, 1, err.join('\n'));
    assert.equal(
      err[1],
      `petstore: ${target}${suffix} exists beside ${target}, and SQLite would read it with the copy: ` +
        'write backups into a folder that only you can write to (docs/operations.md#backups-and-restore).',
    );
    assert.ok(!existsSync(target));
    assert.deepEqual(readFileSync(target + suffix), wal, 'the file is left as it was');
  }
});
