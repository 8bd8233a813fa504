import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { copyFileSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { readMigrations } from '../src/store/migrations.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { sqliteWithPets, tempFolder } from './helpers.js';
import { runDatabase } from './in-process.js';

/** `petstore <argv>` run in process on the SQLite file `db`, with its output collected. */
const petstore = runDatabase;

const folder = (t: TestContext) => tempFolder(t, 'petstore-restore-');

/** A migrated petstore database at `path` holding `pets` animals and one key, closed. */
async function migrated(path: string, pets: number) {
  await sqliteWithPets(path, pets, (db) =>
    db
      .prepare("INSERT INTO api_keys (name, hint, hash, created_at) VALUES ('ops', 'psk_ab', ?, '2026-11-01')")
      .run(Buffer.alloc(32, pets)),
  );
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex');

const countPets = (path: string) => {
  const db = new Database(path, { readonly: true });
  try {
    return db.prepare('SELECT count(*) FROM pets').pluck().get();
  } finally {
    db.close();
  }
};

/** A current database with 3 pets and a good backup, with 5, of another one. */
async function setUp(t: TestContext) {
  const dir = folder(t);
  const current = join(dir, 'live', 'petstore.db');
  mkdirSync(join(dir, 'live'));
  await migrated(current, 3);
  const other = join(dir, 'other.db');
  await migrated(other, 5);
  const good = join(dir, 'good.db');
  const backup = await petstore(['backup', good], other);
  assert.equal(backup.code, 0, backup.err.join('\n'));
  return { dir, current, good };
}

/** A copy of the good backup, changed by `change` (SQL run on it). */
function crafted(dir: string, good: string, name: string, change: string) {
  const path = join(dir, name);
  copyFileSync(good, path);
  const db = new Database(path);
  db.exec(change);
  db.close();
  return path;
}

/**
 * Asserts a restore (into `via`, PETSTORE_DB, the file `current` or a link to it) refused with
 * one line matching `reason`, exit 1, the current database byte-identical.
 */
async function assertRefused(current: string, file: string, reason: RegExp, via = current) {
  const before = sha256(current);
  const liveFiles = readdirSync(join(current, '..')).sort();
  const { code, out, err } = await petstore(['restore', file], via);
  assert.equal(code, 1, err.join('\n'));
  assert.deepEqual(out, []);
  assert.equal(err.length, 1, err.join('\n'));
  assert.ok(!err[0]!.includes('\n'), err[0]);
  assert.match(err[0]!, /^petstore: /);
  assert.match(err[0]!, reason);
  assert.equal(sha256(current), before, 'the current database is byte-identical');
  assert.deepEqual(readdirSync(join(current, '..')).sort(), liveFiles, 'nothing is left beside it');
}

/** The newest migration this version knows, which a copy of the current database records last. */
const latest = readMigrations('sqlite').at(-1)!.name;

test('restore refuses a copy whose schema is not the one its migrations make, naming what differs', async (t) => {
  const { dir, current, good } = await setUp(t);
  const cases: [string, string, RegExp][] = [
    [
      'trigger-on-keys.db',
      'CREATE TRIGGER keys_never_revoked AFTER UPDATE OF revoked_at ON api_keys BEGIN ' +
        'UPDATE api_keys SET revoked_at = NULL WHERE id = NEW.id; END;',
      new RegExp(
        `does not have the schema its migrations \\(${latest} and before\\) make: it has trigger keys_never_revoked on api_keys, which they do not make\\.$`,
      ),
    ],
    [
      'scopes-widened.db',
      "CREATE TRIGGER keys_all_scopes AFTER INSERT ON api_keys BEGIN UPDATE api_keys SET scopes = 'pets:read pets:write metrics:read', expires_at = NULL WHERE id = NEW.id; END;" +
        'CREATE TRIGGER keys_hash_to_pet AFTER INSERT ON api_keys BEGIN ' +
        "INSERT INTO pets (name, category_id, status) VALUES (hex(NEW.hash), 1, 'available'); END;",
      /it has trigger keys_all_scopes on api_keys, which they do not make \(and 1 more difference\)\.$/,
    ],
    [
      'view.db',
      'CREATE VIEW key_hashes AS SELECT id, hash FROM api_keys;',
      /it has view key_hashes, which they do not make/,
    ],
    [
      'extra-index.db',
      'CREATE INDEX pets_name ON pets (name);',
      /it has index pets_name on pets, which they do not make/,
    ],
    [
      'missing-column.db',
      'ALTER TABLE pets DROP COLUMN category_id;',
      /its table pets has columns \(id INTEGER, name TEXT, status TEXT\) where they make \(id INTEGER, name TEXT, category_id INTEGER, status TEXT\)/,
    ],
    [
      'wrong-column.db',
      'ALTER TABLE api_keys RENAME COLUMN scopes TO scope;',
      /its table api_keys has columns \(.*scope TEXT.*\) where they make \(.*scopes TEXT.*\)/,
    ],
    [
      'changed-trigger.db',
      'DROP TRIGGER pets_counted_insert; CREATE TRIGGER pets_counted_insert AFTER INSERT ON pets BEGIN SELECT 1; END;',
      /its trigger pets_counted_insert on pets is not the one they make/,
    ],
    [
      'missing-trigger.db',
      'DROP TRIGGER pets_counted_delete;',
      /it lacks trigger pets_counted_delete on pets, which they make/,
    ],
    [
      'migration-gap.db',
      'DELETE FROM schema_migrations WHERE version = 3;',
      /records later migrations without 003_key_scopes_and_expiry, which no petstore release makes\.$/,
    ],
  ];
  for (const [name, change, reason] of cases) {
    await t.test(name, () => assertRefused(current, crafted(dir, good, name, change), reason));
  }
  const restored = await petstore(['restore', good], current);
  assert.equal(restored.code, 0, restored.err.join('\n'));
  assert.deepEqual(restored.out, [`Restored ${good} (5 pets) into the SQLite database ${current} (PETSTORE_DB).`]);
  assert.equal(countPets(current), 5, 'a good backup still restores');
});

test('restore takes a copy from an older release, whose schema is what its fewer migrations make', async (t) => {
  const { dir, current } = await setUp(t);
  const older = join(dir, 'older.db');
  // The service's schema_migrations table, then the first three steps, as that release applied them.
  await openSqliteStore(older).close();
  const db = new Database(older);
  for (const migration of readMigrations('sqlite').slice(0, 3)) {
    db.exec(migration.sql);
    db.prepare('INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)').run(
      migration.version,
      migration.name,
      '2026-10-01T00:00:00.000Z',
    );
  }
  db.exec("INSERT INTO pets (name, category_id, status) VALUES ('rex', 1, 'available')");
  db.close();
  const { code, out, err } = await petstore(['restore', older], current);
  assert.equal(code, 0, err.join('\n'));
  assert.match(out[0]!, /\(1 pet\) into the SQLite database/);
  const pending = readMigrations('sqlite').length - 3;
  assert.deepEqual(err, [`The service applies the copy's ${pending} pending migration(s) when it starts.`]);
  // The pets table an older release made, plus a trigger: refused like any other.
  const tampered = crafted(
    dir,
    older,
    'older-tampered.db',
    'CREATE TRIGGER t AFTER INSERT ON pets BEGIN SELECT 1; END;',
  );
  await assertRefused(current, tampered, /\(003_key_scopes_and_expiry and before\) make: it has trigger t on pets/);
});

test('restore refuses a copy with a non-empty -wal beside it, and says how to fold it in', async (t) => {
  const { dir, current, good } = await setUp(t);
  const source = join(dir, 'in-use.db');
  copyFileSync(good, source);
  // A connection that keeps its commits in the -wal: the file alone holds 5 pets, the -wal 2 more.
  const writer = new Database(source);
  t.after(() => writer.close());
  writer.pragma('journal_mode = WAL');
  writer.pragma('wal_autocheckpoint = 0');
  writer.exec("INSERT INTO pets (name, category_id, status) VALUES ('six', 1, 'sold'), ('seven', 1, 'sold')");
  assert.ok(lstatSync(`${source}-wal`).size > 0);
  await assertRefused(
    current,
    source,
    new RegExp(
      `^petstore: ${source}-wal holds changes that are not in ${source} yet; .*'PETSTORE_DB=${source} petstore backup <new file>'`,
    ),
  );
  // What the refusal says to do gives a copy that stands alone, with every pet, which restores.
  const folded = join(dir, 'folded.db');
  assert.equal((await petstore(['backup', folded], source)).code, 0);
  const { code, out } = await petstore(['restore', folded], current);
  assert.equal(code, 0);
  assert.match(out[0]!, /\(7 pets\)/);
  assert.equal(countPets(current), 7);
});

test('restore into a symlinked PETSTORE_DB replaces the file the link points to and keeps the link', async (t) => {
  const { dir, current, good } = await setUp(t);
  const links = join(dir, 'links');
  mkdirSync(links);
  const link = join(links, 'petstore.db');
  symlinkSync(current, link);

  await assertRefused(
    current,
    crafted(dir, good, 'view-too.db', 'CREATE VIEW v AS SELECT 1;'),
    /it has view v, which they do not make/,
    link,
  );
  assert.ok(lstatSync(link).isSymbolicLink());
  assert.deepEqual(readdirSync(links), ['petstore.db']);

  const { code, out, err } = await petstore(['restore', good], link);
  assert.equal(code, 0, err.join('\n'));
  assert.deepEqual(out, [
    `Restored ${good} (5 pets) into the SQLite database ${link} (PETSTORE_DB) (the file ${current}, where it points).`,
  ]);
  assert.ok(lstatSync(link).isSymbolicLink(), 'the link is still a link');
  assert.equal(readlinkSync(link), current);
  assert.deepEqual(readdirSync(links), ['petstore.db'], 'no file was put beside the link');
  assert.deepEqual(readdirSync(join(current, '..')), ['petstore.db']);
  assert.equal(countPets(current), 5);

  // A link to nothing: refused, nothing created where it points or beside it.
  const dangling = join(links, 'nowhere.db');
  symlinkSync(join(dir, 'gone', 'petstore.db'), dangling);
  const refused = await petstore(['restore', good], dangling);
  assert.equal(refused.code, 1);
  assert.deepEqual(refused.err, [
    `petstore: the SQLite database ${dangling} (PETSTORE_DB) is a symbolic link to a file that does not exist; point it at the database, or remove it, and restore again.`,
  ]);
  assert.deepEqual(readdirSync(links).sort(), ['nowhere.db', 'petstore.db']);
});
