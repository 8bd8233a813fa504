#!/usr/bin/env node
import './heap.js';
import { parseArgs } from 'node:util';
import { ConfigError, describeSettings, loadConfig, type Config } from './config.js';
import { createKeyCommand, listKeysCommand, revokeKeyCommand, type Output } from './keys/cli.js';
import { serve } from './server.js';
import { openStore } from './store/open.js';
import type { Store } from './store/store.js';

const usage = `Usage: petstore <command> [options]

Commands:
  serve                          Migrate the database and serve the API.
  migrate                        Apply database migrations and exit.
  keys create --name <name>      Issue an API key; the key is printed once, on standard output.
         [--json]                Print {"id","name","key","createdAt"} as one JSON line.
  keys list [--json]             List keys (id, name, first characters, created, revoked); never a secret.
  keys revoke <id>               Revoke a key; every instance refuses it within one second.

Options:
  -h, --help                     Show this help.

Settings (environment variables):
${describeSettings()}
`;

class UsageError extends Error {}

const io: Output = {
  out: (line) => process.stdout.write(line + '\n'),
  err: (line) => process.stderr.write(line + '\n'),
};

async function withStore<T>(config: Config, run: (store: Store) => Promise<T>): Promise<T> {
  const store = await openStore(config);
  try {
    await store.migrate();
    return await run(store);
  } finally {
    await store.close();
  }
}

/** Runs the command line; resolves to the process exit code (serve keeps running). */
export async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: { name: { type: 'string' }, json: { type: 'boolean' }, help: { type: 'boolean', short: 'h' } },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const { positionals, values } = parsed;
  const [command, sub, ...rest] = positionals;
  if (values.help || command === 'help') {
    io.out(usage);
    return 0;
  }
  const config = loadConfig();
  const json = values.json ?? false;

  if (command === 'serve' && sub === undefined) {
    await serve(config);
    return -1;
  }
  if (command === 'migrate' && sub === undefined) {
    const store = await openStore(config);
    const applied = await store.migrate().finally(() => store.close());
    io.err(applied.length ? `Applied ${applied.join(', ')}.` : 'The database is up to date.');
    return 0;
  }
  if (command === 'keys' && sub === 'create' && rest.length === 0) {
    const name = values.name?.trim();
    if (!name || name.length > 100) throw new UsageError('keys create needs --name with 1 to 100 characters');
    await withStore(config, (store) => createKeyCommand(store, name, json, io));
    return 0;
  }
  if (command === 'keys' && sub === 'list' && rest.length === 0) {
    await withStore(config, (store) => listKeysCommand(store, json, io));
    return 0;
  }
  if (command === 'keys' && sub === 'revoke' && rest.length === 1) {
    if (!/^[1-9][0-9]{0,8}$/.test(rest[0]!))
      throw new UsageError('keys revoke needs the numeric id shown by keys list');
    const revoked = await withStore(config, (store) => revokeKeyCommand(store, Number(rest[0]), io));
    return revoked ? 0 : 1;
  }
  throw new UsageError(command ? `unknown command: ${positionals.join(' ')}` : 'no command given');
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exitCode = code;
  },
  (error: unknown) => {
    if (error instanceof UsageError) {
      io.err(`petstore: ${error.message}\n\n${usage}`);
      process.exitCode = 2;
    } else if (error instanceof ConfigError) {
      io.err(`petstore: ${error.message}`);
      process.exitCode = 2;
    } else {
      io.err(`petstore: ${(error as Error).stack ?? String(error)}`);
      process.exitCode = 1;
    }
  },
);
