import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import pg from 'pg';
import { readMigrations } from '../src/store/migrations.js';
import { childEnv, runCli } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

interface Listed {
  version: number;
  name: string;
  state: 'applied' | 'pending' | 'unknown';
  appliedAt: string | null;
}

async function status(env: Record<string, string>): Promise<Listed[]> {
  const { code, stdout, stderr } = await runCli(['migrate', 'status', '--json'], env);
  assert.equal(code, 0, stderr);
  return stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Listed);
}

const FUTURE = '999_from_a_newer_release';

test('SQLite and PostgreSQL carry the same numbered migrations', () => {
  const names = (dialect: 'sqlite' | 'postgres') => readMigrations(dialect).map((m) => m.name);
  assert.deepEqual(names('postgres'), names('sqlite'));
});

/** Where the CLI's database is, for each store: SQLite in a fresh folder, PostgreSQL in a fresh schema. */
const kinds = [
  { name: 'SQLite', skip: false as string | false, env: async (t: TestContext) => childEnv(t) },
  {
    name: 'PostgreSQL',
    skip: postgresSkip,
    env: async (t: TestContext) => childEnv(t, { DATABASE_URL: await createPostgresSchema(t) }),
  },
];

/** The database's tables and its schema_migrations rows: what a refused command must leave as it was. */
async function contents(env: Record<string, string>): Promise<unknown> {
  if (env.DATABASE_URL) {
    const client = new pg.Client({ connectionString: env.DATABASE_URL });
    await client.connect();
    try {
      const tables = await client.query(
        'SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1',
      );
      const rows = await client.query('SELECT version, name, applied_at FROM schema_migrations ORDER BY version');
      return { tables: tables.rows, rows: rows.rows };
    } finally {
      await client.end();
    }
  }
  return createHash('sha256').update(readFileSync(env.PETSTORE_DB!)).digest('hex');
}

/** A database that a newer release made: its schema_migrations holds FUTURE alone, nothing else. */
async function newerDatabase(env: Record<string, string>) {
  const ddl =
    'CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)';
  const insert = `INSERT INTO schema_migrations VALUES (999, '${FUTURE}', '2031-01-01T00:00:00.000Z')`;
  if (env.DATABASE_URL) {
    const client = new pg.Client({ connectionString: env.DATABASE_URL });
    await client.connect();
    await client.query(ddl.replace('applied_at TEXT', 'applied_at TIMESTAMPTZ'));
    await client.query(insert);
    await client.end();
    return;
  }
  const db = new Database(env.PETSTORE_DB!);
  db.pragma('journal_mode = WAL');
  db.exec(`${ddl}; ${insert}`);
  db.close();
}

for (const kind of kinds) {
  test(
    `${kind.name}: migrate status lists every migration, pending then applied with when`,
    { skip: kind.skip },
    async (t) => {
      const env = await kind.env(t);
      const known = readMigrations(kind.name === 'SQLite' ? 'sqlite' : 'postgres');
      const pending = await status(env);
      assert.deepEqual(
        pending,
        known.map(({ version, name }) => ({ version, name, state: 'pending', appliedAt: null })),
      );
      if (!env.DATABASE_URL) assert.ok(!existsSync(env.PETSTORE_DB!), 'status creates no database');

      const before = Date.now();
      assert.equal((await runCli(['migrate'], env)).code, 0);
      const applied = await status(env);
      assert.deepEqual(
        applied.map(({ name, state }) => [name, state]),
        known.map(({ name }) => [name, 'applied']),
      );
      for (const { appliedAt } of applied) {
        assert.ok(Date.parse(appliedAt!) >= before - 1000 && Date.parse(appliedAt!) <= Date.now(), appliedAt!);
      }

      const table = await runCli(['migrate', 'status'], env);
      assert.equal(table.code, 0);
      const [header, first] = table.stdout.split('\n');
      assert.equal(header, 'MIGRATION\tSTATE\tAPPLIED');
      assert.match(first!, /^001_pets_and_keys\tapplied\t[0-9]{4}-[0-9]{2}-[0-9]{2}T/);
      assert.match(table.stderr, /up to date/);
    },
  );

  test(
    `${kind.name}: serve and migrate refuse a database holding a migration this version does not know, with one line, exit 2, nothing written`,
    { skip: kind.skip },
    async (t) => {
      const env = await kind.env(t);
      await newerDatabase(env);
      const before = await contents(env);
      for (const command of ['serve', 'migrate']) {
        const { code, stderr } = await runCli([command], env);
        assert.equal(code, 2, `${command}: ${stderr}`);
        const lines = stderr.split('\n').filter((line) => line.startsWith('petstore:'));
        assert.equal(lines.length, 1, stderr);
        assert.match(lines[0]!, new RegExp(`holds migration ${FUTURE}, which this version of petstore does not know`));
        assert.deepEqual(await contents(env), before, `${command} wrote nothing`);
      }
      if (!env.DATABASE_URL) {
        assert.deepEqual(readdirSync(dirname(env.PETSTORE_DB!)), ['petstore.db'], 'no -wal or -shm left either');
      }
      const listed = await status(env);
      assert.deepEqual(listed.at(-1), {
        version: 999,
        name: FUTURE,
        state: 'unknown',
        appliedAt: '2031-01-01T00:00:00.000Z',
      });
      assert.ok(listed.slice(0, -1).every((m) => m.state === 'pending'));
    },
  );
}
