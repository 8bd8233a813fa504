import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import { test } from 'node:test';
import pg from 'pg';
import { issueKey } from '../src/keys/issue.js';
import { hashKey } from '../src/keys/keys.js';
import { openPostgresStore } from '../src/store/postgres.js';
import { tempFolder } from './helpers.js';
import { childEnv, runCli } from './process.js';
import { forLibpq, missingPgTools, runPgTool } from './pg-tools.js';
import { createPostgresSchema, POSTGRES_URL } from './stores.js';

async function admin(sql: string) {
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

test(
  'PostgreSQL: the pg_dump/pg_restore round trip of docs/operations.md restores pets, keys and migrations',
  { skip: missingPgTools(['pg_dump', 'pg_restore'], 'the pg_dump/pg_restore round trip of docs/operations.md') },
  async (t) => {
    const url = await createPostgresSchema(t);
    const store = openPostgresStore(url);
    await store.migrate();
    const { key } = await issueKey(store, 'ops');
    const pets = [];
    for (const name of ['Rex', 'Tom', 'Kit'])
      pets.push(await store.createPet({ name, categoryId: 2n ** 62n, status: 'sold' }));
    await store.close();

    const folder = tempFolder(t, 'petstore-dump-');
    const dump = join(folder, 'petstore.dump');
    // As docs/operations.md: a custom-format dump of the service's schema, restored into an empty
    // database (--schema: the test database holds other tests' schemas, created and dropped meanwhile).
    const schema = /search_path=([a-z0-9_]+)/.exec(new URL(url).searchParams.get('options') ?? '')![1]!;
    runPgTool('pg_dump', ['--format=custom', '--no-owner', `--schema=${schema}`, '--file', dump, forLibpq(url)]);
    const database = `petstore_restore_${randomBytes(6).toString('hex')}`;
    await admin(`CREATE DATABASE ${database}`);
    t.after(() => admin(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
    const restoredUrl = new URL(url);
    restoredUrl.pathname = `/${database}`;
    runPgTool('pg_restore', ['--no-owner', '--exit-on-error', '--dbname', forLibpq(restoredUrl.href), dump]);

    const listed = await runCli(['migrate', 'status', '--json'], childEnv(t, { DATABASE_URL: restoredUrl.href }));
    assert.equal(listed.code, 0, listed.stderr);
    const states = listed.stdout
      .trim()
      .split('\n')
      .map((line) => (JSON.parse(line) as { state: string }).state);
    assert.ok(states.length > 0 && states.every((state) => state === 'applied'), listed.stdout);

    const restored = openPostgresStore(restoredUrl.href);
    t.after(() => restored.close());
    assert.deepEqual(await restored.migrate(), [], 'nothing left to migrate');
    assert.deepEqual(await restored.listPets({ limit: 10 }), pets);
    assert.ok(await restored.findActiveKey(hashKey(key)), 'the key works against the restored database');
    // The identity sequence came along: ids are never reused.
    const next = await restored.createPet({ name: 'New', categoryId: 1n, status: 'available' });
    assert.ok(next.id > pets.at(-1)!.id);
  },
);
