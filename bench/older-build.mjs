// Plain JavaScript so it runs on bare node, without the TypeScript loader.
// bench:compare's `main=bench/older-build.mjs` with `OLDER_BUILD=<checkout>`: runs the build in
// <checkout>/dist (a worktree of an older commit, built) beside this one, although the seeded
// database holds migrations that build does not know and would refuse. It is given a database of
// its own, made from the seeded one as that build's migrations would have it:
// - SQLite (PETSTORE_DB): a copy of the file, without the tables of the newer migrations;
// - PostgreSQL (DATABASE_URL with `options=-c search_path=<schema>`): the schema `<schema>_older`,
//   migrated by that build, with the seeded pets and keys copied in.
// The pets and the key are the seeded ones, so every variant serves the same requests.
//
//   git worktree add /tmp/before d9f208d && (cd /tmp/before && npm ci && npm run build)
//   npm run bench:compare -- --variant 'this build:' --variant 'd9f208d:main=bench/older-build.mjs OLDER_BUILD=/tmp/before'
import { spawnSync } from 'node:child_process';
import { copyFileSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import process from 'node:process';
import { URL } from 'node:url';
import Database from 'better-sqlite3';
import pg from 'pg';

const older = process.env.OLDER_BUILD;
if (!older) throw new Error('OLDER_BUILD names the checkout whose dist/main.js to run');
const main = join(older, 'dist', 'main.js');
const versions = (folder) => readdirSync(folder).filter((file) => /^[0-9]{3}_.*\.sql$/.test(file));

/** The tables this checkout's migrations make that the older build's do not. */
function newerTables(dialect) {
  const known = new Set(versions(join(older, 'migrations', dialect)));
  const here = new URL(`../migrations/${dialect}/`, import.meta.url);
  return versions(here)
    .filter((file) => !known.has(file))
    .flatMap((file) =>
      [...readFileSync(new URL(file, here), 'utf8').matchAll(/CREATE TABLE (\w+)/gi)].map((m) => m[1]),
    );
}

if (process.env.DATABASE_URL) {
  const url = new URL(process.env.DATABASE_URL);
  const seeded = /search_path=(\w+)/.exec(url.searchParams.get('options') ?? '')?.[1];
  if (!seeded) throw new Error('DATABASE_URL names no search_path: bench:compare seeds a schema of its own');
  const schema = `${seeded}_older`;
  const client = new pg.Client({ connectionString: url.href });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE; CREATE SCHEMA ${schema}`);
  url.searchParams.set('options', `-c search_path=${schema}`);
  const migrated = spawnSync(process.execPath, [main, 'migrate'], {
    env: { ...process.env, DATABASE_URL: url.href },
    encoding: 'utf8',
  });
  if (migrated.status !== 0) throw new Error(`migrate with the older build failed:\n${migrated.stderr}`);
  for (const table of ['pets', 'api_keys']) {
    await client.query(`INSERT INTO ${schema}.${table} OVERRIDING SYSTEM VALUE SELECT * FROM ${seeded}.${table}`);
  }
  await client.query(
    `SELECT setval(pg_get_serial_sequence('${schema}.pets', 'id'), (SELECT max(id) FROM ${schema}.pets))`,
  );
  await client.query(`ANALYZE ${schema}.pets`);
  await client.end();
  process.env.DATABASE_URL = url.href;
} else {
  const seeded = process.env.PETSTORE_DB;
  const copy = `${seeded}.older`;
  const source = new Database(seeded);
  source.pragma('wal_checkpoint(TRUNCATE)');
  source.close();
  copyFileSync(seeded, copy);
  const db = new Database(copy);
  const tables = newerTables('sqlite');
  const known = Math.max(...versions(join(older, 'migrations', 'sqlite')).map((file) => Number(file.slice(0, 3))));
  db.exec(tables.map((table) => `DROP TABLE IF EXISTS ${table};`).join(''));
  db.prepare('DELETE FROM schema_migrations WHERE version > ?').run(known);
  db.close();
  process.env.PETSTORE_DB = copy;
}
await import(main);
