import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { settings, type Config } from './config.js';
import { issueFirstKey } from './keys/cli.js';
import { openStore } from './store/open.js';
import type { Store } from './store/store.js';

const DRAIN_MS = 10_000;

/** One line on standard error per migration, as soon as it is applied: long ones show progress. */
export function reportMigration(name: string, ms: number): void {
  process.stderr.write(`Applied ${name} (${Math.round(ms)} ms).\n`);
}

/** A failure to start that the operator fixes in a setting: one line, no stack, exit status 1. */
export class StartupError extends Error {}

/**
 * The database a configuration names, with the setting that names it and no password.
 *
 * @example describeDatabase(config) // 'the SQLite database /srv/petstore/data/petstore.db (PETSTORE_DB)'
 */
export function describeDatabase(config: Config): string {
  if (config.databaseUrl) {
    return `the PostgreSQL database ${settings.databaseUrl.show(config.databaseUrl)} (DATABASE_URL)`;
  }
  const path = config.sqlitePath === ':memory:' ? ':memory:' : resolve(config.sqlitePath);
  return `the SQLite database ${path} (PETSTORE_DB)`;
}

/** The first line of what went wrong, also for Node's AggregateError, whose message is empty. */
function reasonOf(error: unknown): string {
  const { message, code, errors } = error as Error & { code?: string; errors?: Error[] };
  const text = message || errors?.map((inner) => inner.message).join('; ') || code || String(error);
  return text.split('\n')[0]!.replace(/^[A-Z](?=[a-z])/, (first) => first.toLowerCase());
}

/**
 * Opens and migrates the configured store, with the names of the migrations it applied; a
 * failure names the setting that points at the database.
 */
export async function openMigratedStore(config: Config): Promise<{ store: Store; applied: string[] }> {
  let store: Store | undefined;
  try {
    store = await openStore(config);
    const applied = await store.migrate(reportMigration);
    return { store, applied };
  } catch (error) {
    await store?.close().catch(() => {});
    throw new StartupError(`cannot use ${describeDatabase(config)}: ${reasonOf(error)}`, { cause: error });
  }
}

const listenFailures: Record<string, string> = {
  EADDRINUSE: 'the address is already in use',
  EACCES: 'permission denied',
  EADDRNOTAVAIL: 'the address is not one of this machine',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve',
};

function urlOf(app: FastifyInstance) {
  const { address, port } = app.server.address() as AddressInfo;
  return `http://${address.includes(':') ? `[${address}]` : address}:${port}/v1`;
}

function announceFirstKey(key: string, app: FastifyInstance) {
  const url = `${urlOf(app)}/pets`;
  process.stderr.write(
    [
      '',
      'No API key existed, so this one was created. It is shown only this once: keep it.',
      '',
      `    ${key}`,
      '',
      // The key once, on its own line: a second copy is a second place to leak it from.
      `Try it:  curl -H "Authorization: Bearer <the key above>" ${url}`,
      "More keys: 'npm run petstore -- keys create --name <name>'.",
      '',
      '',
    ].join('\n'),
  );
}

/**
 * Opens the store, migrates it, listens, and issues the first key when there is none. SIGTERM
 * and SIGINT stop accepting, let in-flight requests finish, then close the database.
 * A database or an address that cannot be used throws a StartupError naming its setting.
 */
export async function serve(config: Config): Promise<{ app: FastifyInstance; store: Store }> {
  const { store } = await openMigratedStore(config);
  const app = await buildApp({ config, store });
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    await app.close();
    await store.close();
    const code = (error as { code?: string }).code ?? '';
    const reason = listenFailures[code] ?? reasonOf(error);
    throw new StartupError(`cannot listen on ${config.host}:${config.port} (HOST, PORT): ${reason}`, { cause: error });
  }
  process.stderr.write(`Serving ${urlOf(app)} from ${describeDatabase(config)}.\n`);
  // After listening: a key issued by a start that then failed would never have been shown.
  const first = await issueFirstKey(store);
  if (first) announceFirstKey(first.key, app);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'draining');
    const timer = setTimeout(() => {
      app.log.error('drain timed out; exiting');
      process.exit(1);
    }, DRAIN_MS);
    timer.unref();
    await app.close();
    await store.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  return { app, store };
}
