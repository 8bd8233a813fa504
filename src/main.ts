#!/usr/bin/env node
import './runtime.js';
import { existsSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { ConfigError, describeSettings, loadConfig, type Config } from './config.js';
import { runWebhooksCommand, webhooksHelp } from './events/cli.js';
import { keysHelp, runKeysCommand, type Output } from './keys/cli.js';
import { databaseHelp, isDatabaseCommand, runDatabaseCommand } from './store/cli.js';
import { UnknownMigrationError } from './store/migrations.js';
import { describeDatabase, openMigratedStore, serve, StartupError } from './server.js';
import type { Store } from './store/store.js';
import { version } from './version.js';

const storeSettings = describeSettings(['sqlitePath', 'databaseUrl', 'dbTimeoutMs']);

const exitCodes = `Exit status: 0 done, 1 failed, 2 bad command line, setting or Node.js version.`;

const usage = `Usage: petstore <command> [options]
       (npx petstore <command> in the installation folder)

Commands:
  serve                          Migrate the database (creating it when missing) and serve the API.
  migrate                        Create the database when missing, apply its migrations and exit.
  keys create --name <name>      Issue an API key; the key is printed once, on standard output.
         [--scope <scope>]...    pets:read, pets:write, metrics:read (the default), events:read.
         [--expires-in <90d>]    Or --expires-at <RFC 3339 instant>; by default it never expires.
         [--json]                Print {"id","name","key","scopes","createdAt","expiresAt"} as one JSON line.
  keys list [--json]             List keys (id, name, scopes, created, expires, state, last used); never a secret.
  keys revoke <id>               Revoke a key; every instance refuses it within one second.
  keys roll <id> [--grace 24h]   Issue a successor; the old key works until the grace ends.
  webhooks add <url>             Add a webhook endpoint; its signing secret is printed once.
         [--description <text>] [--json]
  webhooks list [--json]         List endpoints (state, last success and failure, events waiting).
  webhooks remove <id>           Remove an endpoint.
  webhooks enable <id>           Enable an endpoint disabled after failing for the give-up period.
  webhooks roll <id> [--grace 24h]
                                 Issue a new signing secret; the old one also signs until the grace ends.
  webhooks deliveries <id> [--json]
                                 An endpoint's recent attempts (event, attempt, when, status or error).
  migrate status [--json]        List migrations: applied (with when), pending, or unknown to this version.
  backup <file> [--force]        Write a consistent copy of the SQLite database, even while it serves.
  restore <file>                 Check a copy and put it in place of the SQLite database (service stopped).

Options:
  -h, --help                     Show this help, or a command's: petstore keys create --help.
  --version                      Show the version of petstore and of Node.js running it.

Settings (environment variables):
${describeSettings()}
`;

/** Help for each command, shown by `petstore <command> --help` and `petstore help <command>`. */
const commandHelp: Record<string, string> = {
  serve: `Usage: petstore serve

Applies pending database migrations (one line each on standard error), issues a first API key
when the database has none (printed once, on standard error), then serves the API. Logs are JSON
lines on standard output. SIGTERM or SIGINT stops accepting, lets in-flight requests finish
(10 s at most), closes the database and exits 0.

Settings (environment variables):
${describeSettings()}
`,
  migrate: `Usage: petstore migrate

Applies the database migrations not yet applied, printing one line on standard error as each
is applied, then exits. A SQLite file (PETSTORE_DB) that does not exist is created, with its
folder: every other command but serve refuses one. Safe to run from several places at once:
each migration is applied exactly once.

Settings (environment variables):
${storeSettings}

${exitCodes}
`,
  ...keysHelp,
  ...webhooksHelp,
  ...databaseHelp,
};

class UsageError extends Error {
  constructor(
    message: string,
    readonly help = usage,
  ) {
    super(message);
  }
}

// A reader that goes away (`petstore keys list | head -1`) is not an error: what is left to
// write to it is dropped, and the command finishes as it would have.
const closed = new Set<NodeJS.WriteStream>();
for (const stream of [process.stdout, process.stderr]) {
  stream.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    closed.add(stream);
  });
}
const write = (stream: NodeJS.WriteStream, line: string) => {
  if (!closed.has(stream)) stream.write(line + '\n');
};

const io: Output = {
  out: (line) => write(process.stdout, line),
  err: (line) => write(process.stderr, line),
};

/**
 * Opens and migrates the configured database, first saying on standard error which one it is:
 * run from another folder, the default PETSTORE_DB names another file. A SQLite file that does
 * not exist is created only by `serve` and `migrate` (`mayCreate`), and the note says so: any
 * other command refuses it, since a key put in a new file is one the service never sees.
 */
async function openNamedStore(config: Config, { mayCreate = false } = {}) {
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

/** Runs a keys command on the configured database, which must exist. */
async function withStore<T>(config: Config, run: (store: Store) => Promise<T>): Promise<T> {
  const { store } = await openNamedStore(config);
  try {
    return await run(store);
  } finally {
    await store.close();
  }
}

/** The help a command line asks for: `<command> --help`, `help <command>`, or none. */
function askedHelp(positionals: string[], help: boolean): string | undefined {
  const words = positionals[0] === 'help' ? positionals.slice(1) : help ? positionals : undefined;
  if (!words) return undefined;
  for (let n = Math.min(words.length, 2); n > 0; n--) {
    const text = commandHelp[words.slice(0, n).join(' ')];
    if (text) return text;
  }
  return usage;
}

/** Runs the command line; resolves to the process exit code (serve keeps running). */
export async function main(argv: string[]): Promise<number> {
  if (isDatabaseCommand(argv))
    return runDatabaseCommand(argv, { io, config: () => loadConfig(), describe: describeDatabase });
  if (argv[0] === 'keys')
    return runKeysCommand(argv.slice(1), {
      io,
      withStore: (run) => withStore(loadConfig(), run),
    });
  if (argv[0] === 'webhooks')
    return runWebhooksCommand(argv.slice(1), {
      io,
      withStore: (run) => withStore(loadConfig(), run),
      allowHttp: () => loadConfig().webhookAllowHttp,
    });
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: {
        name: { type: 'string' },
        json: { type: 'boolean' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean' },
      },
    });
  } catch (error) {
    const words = argv.filter((arg) => !arg.startsWith('-'));
    throw new UsageError((error as Error).message, askedHelp(words, true));
  }
  const { positionals, values } = parsed;
  if (values.version && positionals.length === 0) {
    io.out(`petstore ${version} (Node.js ${process.versions.node})`);
    return 0;
  }
  const help = askedHelp(positionals, values.help ?? false);
  if (help) {
    io.out(help);
    return 0;
  }
  const [command, sub] = positionals;
  const config = loadConfig();

  if (command === 'serve' && sub === undefined) {
    await serve(config);
    return -1;
  }
  if (command === 'migrate' && sub === undefined) {
    const { store, applied } = await openNamedStore(config, { mayCreate: true });
    await store.close();
    io.err(
      applied.length
        ? `Applied ${applied.length} migration${applied.length > 1 ? 's' : ''}; the database is up to date.`
        : 'The database is up to date.',
    );
    return 0;
  }
  const nearest = askedHelp(positionals, true);
  throw new UsageError(command ? `unknown command: ${positionals.join(' ')}` : 'no command given', nearest);
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof UsageError) {
      io.err(`petstore: ${error.message}\n\n${error.help}`);
      process.exitCode = 2;
    } else if (error instanceof StartupError && error.cause instanceof UnknownMigrationError) {
      // docs/operations.md#migrations: a database a newer release touched is refused with exit 2.
      io.err(`petstore: ${error.message}`);
      process.exitCode = 2;
    } else if (error instanceof StartupError) {
      io.err(`petstore: ${error.message}`);
      process.exitCode = 1;
    } else if (error instanceof ConfigError) {
      io.err(`petstore: ${error.message}`);
      process.exitCode = 2;
    } else {
      io.err(`petstore: ${(error as Error).stack ?? String(error)}`);
      process.exitCode = 1;
    }
  },
);
