#!/usr/bin/env node
import './runtime.js';
import { parseArgs } from 'node:util';
import { ConfigError, loadConfig } from './config.js';
import { oneLine } from './errors.js';
import { isDatabaseCommand, migrateCommand, runDatabaseCommand, withStore } from './cli/database.js';
import { UsageError } from './cli/args.js';
import { askedHelp, usage } from './cli/help.js';
import { runKeysCommand } from './cli/keys.js';
import { processOutput } from './cli/output.js';
import { runWebhooksCommand } from './cli/webhooks.js';
import { UnknownMigrationError } from './store/migrations.js';
import { describeDatabase, serve, StartupError } from './server.js';
import { version } from './version.js';

const io = processOutput();

/** Runs the command line; resolves to the process exit code (serve keeps running). */
export async function main(argv: string[]): Promise<number> {
  if (isDatabaseCommand(argv))
    return runDatabaseCommand(argv, { io, config: () => loadConfig(), describe: describeDatabase });
  if (argv[0] === 'keys')
    return runKeysCommand(argv.slice(1), {
      io,
      withStore: (run) => withStore(loadConfig(), io, run),
    });
  if (argv[0] === 'webhooks')
    return runWebhooksCommand(argv.slice(1), {
      io,
      withStore: (run) => withStore(loadConfig(), io, run),
      allowHttp: () => loadConfig().webhookAllowHttp,
      timeoutMs: () => loadConfig().webhookTimeoutMs,
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
    return migrateCommand(config, io);
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
      // One line, whatever the command line held.
      io.err(`petstore: ${oneLine(error.message)}\n\n${error.help ?? usage}`);
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
