import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { ConfigError, describeSettings, type Config } from '../config.js';
import { describeDatabase, openMigratedStore } from '../server.js';
import { backupSqlite, OperationRefused, restoreSqlite } from '../store/backup.js';
import { migrationStates, readMigrations, type AppliedMigration } from '../store/migrations.js';
import { readSqliteMigrations } from '../store/sqlite.js';
import type { ReplicaState, Store } from '../store/store.js';
import { oneLine } from '../errors.js';
import { noArguments, UsageError } from './args.js';
import type { Output } from './output.js';

export interface DatabaseDeps {
  io: Output;
  /** The configuration, read when a command needs it (a bad setting is a ConfigError). */
  config: () => Config;
  /** The database a configuration names, with its setting (server.ts describeDatabase). */
  describe: (config: Config) => string;
}

const storeSettings = describeSettings(['sqlitePath', 'databaseUrl', 'dbTimeoutMs']);
const statusSettings = describeSettings([
  'sqlitePath',
  'databaseUrl',
  'databaseReadUrls',
  'replicaMaxLagMs',
  'dbTimeoutMs',
]);

/** Help for the database commands, shown by `petstore <command> --help` and `petstore help <command>`. */
export const databaseHelp: Record<string, string> = {
  migrate: `Usage: petstore migrate

Applies the database migrations not yet applied, printing one line on standard error as each
is applied, then exits. A SQLite file (PETSTORE_DB) that does not exist is created, with its
folder: every other command but serve refuses one. Safe to run from several places at once:
each migration is applied exactly once.

Settings (environment variables):
${storeSettings}

Exit status: 0 done, 1 failed, 2 bad command line, setting or Node.js version.
`,
  backup: `Usage: petstore backup <file> [--force]

Writes a consistent copy of the SQLite database (PETSTORE_DB) to <file> while the service runs
and takes writes, with SQLite's online backup: every animal acknowledged with 201 before the
command started is in the copy. The copy is readable by its owner alone (0600) and stands
alone (no -wal file). It is written in a private folder (0700) beside <file> and moved into
place; a file another process puts beside it, or a -wal, -journal or -shm beside <file>, stops
it with nothing written. Do not back up into a folder other users can write to. Prints the
copy's path and how many animals it holds.

Options:
  --force    Replace <file> when it exists; without it an existing file is refused.

On PostgreSQL (DATABASE_URL) it refuses: use pg_dump (docs/operations.md#backups-and-restore).

Settings (environment variables):
${storeSettings}

Exit status: 0 written, 1 refused or failed, 2 bad command line or setting (PostgreSQL).
`,
  restore: `Usage: petstore restore <file>

Puts the copy in <file> in place of the SQLite database (PETSTORE_DB), atomically. The copy is
checked first: SQLite's integrity check; a petstore database whose migrations this version
knows; a schema (tables, indexes, triggers, views) exactly the one those migrations make. A
damaged, foreign or altered file is refused and the database is left as it was, and so is a
<file> with a non-empty -wal or -journal beside it (write a copy that stands alone with
'PETSTORE_DB=<file> petstore backup <new file>' and restore that). A PETSTORE_DB that is a
symbolic link is followed: the file it points to is replaced, and the link stays. Refused
while any process has the database open (a service, a keys command): stop the service first.
The service applies the copy's pending migrations when it starts. Ids go on: the copy gets the
id counters of the database it replaces (pets, keys, webhook endpoints), and its event ids start
past every event id given out before, even by a database that is gone
(docs/operations.md#ids-after-a-restore).

On PostgreSQL (DATABASE_URL) it refuses: use pg_restore (docs/operations.md#backups-and-restore).

Settings (environment variables):
${storeSettings}

Exit status: 0 restored, 1 refused or failed, 2 bad command line or setting (PostgreSQL).
`,
  'migrate status': `Usage: petstore migrate status [--json]

Lists each migration this version knows, applied (with when) or pending, and any the database
holds that this version does not know (a newer release applied it: serve and migrate refuse
such a database). Changes nothing; a SQLite file that does not exist has every migration pending.
On PostgreSQL it then names, on standard error, the primary (DATABASE_URL), the standbys it
streams to, and each read replica (DATABASE_READ_URLS) as the service judges it: in use or left
out and why, and how far behind (docs/operations.md#read-replicas).

Options:
  --json     One JSON line per migration: {"version","name","state","appliedAt"}; state is
             applied, pending or unknown; appliedAt null when pending.

Settings (environment variables):
${statusSettings}

Exit status: 0 listed, 1 the database cannot be read, 2 bad command line or setting.
`,
};

/** True for the command lines runDatabaseCommand runs. */
export function isDatabaseCommand(argv: string[]): boolean {
  return argv[0] === 'backup' || argv[0] === 'restore' || (argv[0] === 'migrate' && argv[1] === 'status');
}

/** The one positional argument, a file, of `backup` and `restore`. */
function fileArgument(positionals: string[], command: string): string {
  if (positionals.length !== 1 || positionals[0] === '') throw new UsageError(`${command} needs one file name`);
  return positionals[0]!;
}

function sqliteOnly(config: Config, command: 'backup' | 'restore', io: Output): boolean {
  if (!config.databaseUrl) return true;
  const tool = command === 'backup' ? 'pg_dump' : 'pg_restore';
  io.err(
    `petstore: ${command} works on a SQLite database; this one is PostgreSQL (DATABASE_URL): use ${tool}, as docs/operations.md shows.`,
  );
  return false;
}

async function backupCommand(deps: DatabaseDeps, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { force: { type: 'boolean' } } });
  const file = fileArgument(positionals, 'backup');
  const config = deps.config();
  if (!sqliteOnly(config, 'backup', deps.io)) return 2;
  deps.io.err(`Backing up ${deps.describe(config)}.`);
  const { path, pets } = await backupSqlite(config.sqlitePath, file, {
    force: values.force ?? false,
    busyTimeoutMs: config.dbTimeoutMs,
  });
  deps.io.out(`Wrote ${path}: ${pets} pet${pets === 1 ? '' : 's'}.`);
  return 0;
}

async function restoreCommand(deps: DatabaseDeps, args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, options: {} });
  const file = fileArgument(positionals, 'restore');
  const config = deps.config();
  if (!sqliteOnly(config, 'restore', deps.io)) return 2;
  const database = deps.describe(config);
  const { pets, migrations, path } = await restoreSqlite(file, config.sqlitePath, database);
  const pending = readMigrations('sqlite').length - migrations.length;
  // A symbolic link is followed: say which file now holds the copy.
  const where = path === resolve(config.sqlitePath) ? '' : ` (the file ${path}, where it points)`;
  deps.io.out(`Restored ${resolve(file)} (${pets} pet${pets === 1 ? '' : 's'}) into ${database}${where}.`);
  if (pending > 0) deps.io.err(`The service applies the copy's ${pending} pending migration(s) when it starts.`);
  return 0;
}

async function statusCommand(deps: DatabaseDeps, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
  noArguments(positionals, databaseHelp['migrate status']!);
  const config = deps.config();
  const database = deps.describe(config);
  let applied: AppliedMigration[] = [];
  const dialect = config.databaseUrl ? 'postgres' : 'sqlite';
  try {
    if (config.databaseUrl) {
      // Loaded only when used, as store/open.ts does.
      const { readPostgresMigrations } = await import('../store/postgres.js');
      applied = await readPostgresMigrations(config.databaseUrl, config.dbTimeoutMs);
    } else if (config.sqlitePath !== ':memory:' && existsSync(config.sqlitePath)) {
      applied = readSqliteMigrations(config.sqlitePath, config.dbTimeoutMs);
    } else {
      deps.io.err(`${database} does not exist: every migration is pending.`);
    }
  } catch (error) {
    throw new OperationRefused(`cannot read ${database}: ${(error as Error).message.split('\n')[0]}`);
  }
  const states = migrationStates(readMigrations(dialect), applied);
  const { io } = deps;
  if (values.json) {
    for (const { version, name, state, appliedAt } of states) {
      io.out(JSON.stringify({ version, name, state, appliedAt: appliedAt?.toISOString() ?? null }));
    }
  } else {
    io.out(['MIGRATION', 'STATE', 'APPLIED'].join('\t'));
    for (const { name, state, appliedAt } of states) io.out([name, state, appliedAt?.toISOString() ?? '-'].join('\t'));
  }
  if (config.databaseUrl) await describeReplication(config, io);
  const unknown = states.filter((m) => m.state === 'unknown').map((m) => m.name);
  const pending = states.filter((m) => m.state === 'pending').length;
  if (unknown.length > 0) {
    io.err(`${database} holds ${unknown.join(', ')}, which this version does not know: serve and migrate refuse it.`);
  } else if (pending > 0) {
    io.err(`${pending} pending: 'petstore migrate' (or serve) applies them.`);
  } else {
    io.err('The database is up to date.');
  }
  return 0;
}

const LEFT_OUT_BECAUSE: Record<Exclude<ReplicaState['state'], 'in_use'>, string> = {
  unreachable: 'it does not answer',
  promoted: 'it is not in recovery (promoted, or not a replica)',
  other_cluster: 'it replicates another cluster than DATABASE_URL',
  paused: 'its replay is paused',
  unmeasured: 'its lag could not be measured yet',
  lagging: 'it is further behind than PETSTORE_REPLICA_MAX_LAG_MS',
};

const behind = (ms: number | null) => (ms === null ? '' : `, ${ms} ms behind`);

/** The primary, the standbys it streams to, and each read replica as the service would judge it. */
async function describeReplication(config: Config, io: Output): Promise<void> {
  // Loaded only when used, as store/open.ts does.
  const { measureReplication } = await import('../store/postgres-replicas.js');
  const { databaseName } = await import('../store/postgres-connection.js');
  const { standbys, replicas, primaryAnswering } = await measureReplication(
    config.databaseUrl!,
    config.databaseReadUrls,
    // Long enough for a check of each, and to find one further behind than the bound.
    {
      timeoutMs: config.dbTimeoutMs,
      maxLagMs: config.replicaMaxLagMs,
      waitMs: Math.min(config.replicaMaxLagMs + 1000, 3000),
    },
  );
  const streamsTo =
    standbys === undefined
      ? 'its standbys could not be read'
      : standbys.length === 0
        ? 'it streams to no standby'
        : `it streams to ${standbys.map((s) => `${s.name} (${s.state}${behind(s.replayLagMs === null ? null : Math.round(s.replayLagMs))})`).join(', ')}`;
  io.err(`Primary ${databaseName(config.databaseUrl!)} (DATABASE_URL): ${streamsTo}.`);
  if (replicas.length === 0) io.err('No read replica is set (DATABASE_READ_URLS).');
  for (const { name, state, lagMs } of replicas) {
    const judged =
      state === 'in_use' ? `read from${behind(lagMs)}` : `left out: ${LEFT_OUT_BECAUSE[state]}${behind(lagMs)}`;
    io.err(`Read replica ${name} (DATABASE_READ_URLS): ${judged}.`);
  }
  if (replicas.length > 0 && !primaryAnswering)
    io.err('The primary did not answer: replicas are judged by its last answer.');
}

const commands: Record<string, (deps: DatabaseDeps, args: string[]) => Promise<number>> = {
  backup: backupCommand,
  restore: restoreCommand,
  'migrate status': statusCommand,
};

/**
 * `petstore backup|restore|migrate status …`: parses its own arguments, runs, and resolves to
 * the exit status. A refusal is one line on standard error and 1; a bad command line prints the
 * command's usage and is 2.
 *
 * @example process.exitCode = await runDatabaseCommand(['backup', '/backups/monday.db'], deps);
 */
export async function runDatabaseCommand(argv: string[], deps: DatabaseDeps): Promise<number> {
  const name = argv[0] === 'migrate' ? 'migrate status' : argv[0]!;
  const args = argv.slice(name.split(' ').length);
  const help = databaseHelp[name]!;
  if (args.includes('--help') || args.includes('-h')) {
    deps.io.out(help);
    return 0;
  }
  try {
    return await commands[name]!(deps, args);
  } catch (error) {
    const code = String((error as { code?: unknown }).code);
    if (error instanceof UsageError || code.startsWith('ERR_PARSE_ARGS')) {
      // One line, whatever the command line held.
      deps.io.err(`petstore: ${oneLine((error as Error).message)}\n\n${help}`);
      return 2;
    }
    if (error instanceof OperationRefused) {
      deps.io.err(`petstore: ${error.message}`);
      return 1;
    }
    // A file or folder that cannot be made or read, a database SQLite refuses: the reason, one line.
    if ((/^E[A-Z]+$/.test(code) && (error as { path?: unknown }).path !== undefined) || code.startsWith('SQLITE_')) {
      deps.io.err(`petstore: ${name} failed: ${(error as Error).message}`);
      return 1;
    }
    throw error;
  }
}

/**
 * Opens and migrates the configured database, first saying on standard error which one it is:
 * run from another folder, the default PETSTORE_DB names another file. A SQLite file that does
 * not exist is created only by `serve` and `migrate` (`mayCreate`), and the note says so: any
 * other command refuses it, since a key put in a new file is one the service never sees.
 */
async function openNamedStore(config: Config, io: Output, { mayCreate = false } = {}) {
  const database = describeDatabase(config);
  const missing = !config.databaseUrl && config.sqlitePath !== ':memory:' && !existsSync(config.sqlitePath);
  if (missing && !mayCreate) {
    throw new ConfigError(
      `${database} does not exist; set PETSTORE_DB to the service's database file (or create one with 'petstore migrate')`,
    );
  }
  return openMigratedStore(config, () =>
    io.err(missing ? `Created ${database}, which did not exist.` : `Using ${database}.`),
  );
}

/** Runs `run` on the configured database, which must exist, and closes it. */
export async function withStore<T>(config: Config, io: Output, run: (store: Store) => Promise<T>): Promise<T> {
  const { store } = await openNamedStore(config, io);
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

/** `petstore migrate`: creates the database when missing, applies its migrations, and resolves to 0. */
export async function migrateCommand(config: Config, io: Output): Promise<number> {
  const { store, applied } = await openNamedStore(config, io, { mayCreate: true });
  await store.close();
  io.err(
    applied.length
      ? `Applied ${applied.length} migration${applied.length > 1 ? 's' : ''}; the database is up to date.`
      : 'The database is up to date.',
  );
  return 0;
}
