import { randomBytes } from 'node:crypto';
import { after, type TestContext } from 'node:test';
import { clusterMissing, PG_BIN, startPair, type Pair } from '../bench/pg-cluster.js';
import { openPostgresStore } from '../src/store/postgres.js';

const missing = clusterMissing();
const ci = process.env.CI === 'true';
if (missing !== undefined) {
  process.stderr.write(
    ci
      ? `\n${missing}: CI=true, so the read replica tests FAIL.\n\n`
      : `\n${missing}: SKIPPED the read replica tests.\nInstall PostgreSQL's server programs, or set PETSTORE_PG_BIN, to run them.\n\n`,
  );
}

/** Why the tests that start their own primary and replica are skipped; false when they run (always in CI, where they fail instead). */
export const pairSkip: string | false = missing !== undefined && !ci ? `${missing} (${PG_BIN})` : false;

let shared: Promise<Pair> | undefined;

/**
 * The primary and streaming replica of this test file, started by its first test (PostgreSQL's
 * initdb, pg_basebackup -R and pg_ctl in a temporary folder) and removed after the file's tests.
 * Tests share it: each works in a schema of its own (replicatedSchema).
 */
export function sharedPair(): Promise<Pair> {
  if (missing !== undefined) return Promise.reject(new Error(`${missing} and CI=true`));
  shared ??= startPair({ settings: ["log_statement = 'all'"] });
  return shared;
}

after(async () => {
  const pair = await shared?.catch(() => undefined);
  shared = undefined;
  await pair?.remove();
});

/** `url` with every connection in `schema` (libpq `options=-c search_path=…`). */
export function inSchema(url: string, schema: string): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c search_path=${schema}`);
  return parsed.href;
}

/**
 * A new schema on `pair`'s primary, migrated and replayed by the replica, dropped after the
 * test: the primary's URL and the replica's, both in it.
 */
export async function replicatedSchema(t: TestContext, pair: Pair): Promise<{ url: string; readUrl: string }> {
  const schema = `petstore_replica_${randomBytes(6).toString('hex')}`;
  await pair.primary.query(`CREATE SCHEMA ${schema}`);
  t.after(() => pair.primary.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => {}));
  const url = inSchema(pair.primary.url, schema);
  const store = openPostgresStore(url, { poolSize: 1 });
  try {
    await store.migrate();
  } finally {
    await store.close();
  }
  await pair.caughtUp();
  return { url, readUrl: inSchema(pair.replica.url, schema) };
}
