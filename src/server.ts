import { createServer, type AddressInfo, type Server } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { settings, type Config } from './config.js';
import { issueFirstKey } from './keys/issue.js';
import { openStore } from './store/open.js';
import { readMigrations, refuseUnknownMigrations } from './store/migrations.js';
import { holdServeLock, ServedElsewhere } from './store/serve-lock.js';
import { readSqliteMigrations } from './store/sqlite.js';
import type { Store } from './store/store.js';
import { startTracing, stopTracing } from './tracing.js';
import { version } from './version.js';

// The relay waits for its attempts in flight within it (src/events/events.ts, RELAY_GRACE_MS).
const DRAIN_MS = 10_000;
// Within the drain's bound: a collector that does not answer loses the last spans, not the exit.
const FLUSH_MS = 3_000;

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
 * failure names the setting that points at the database. `opened` runs once it is open, before
 * the first migration. `readReplicas`: as openStore's.
 */
export async function openMigratedStore(
  config: Config,
  opened?: () => void,
  { readReplicas = false } = {},
): Promise<{ store: Store; applied: string[] }> {
  let store: Store | undefined;
  try {
    store = await openStore(config, { readReplicas });
    opened?.();
    const applied = await store.migrate(reportMigration);
    return { store, applied };
  } catch (error) {
    await store?.close().catch(() => {});
    if (error instanceof StartupError) throw error;
    throw new StartupError(`cannot use ${describeDatabase(config)}: ${reasonOf(error)}`, { cause: error });
  }
}

/**
 * One process serves a SQLite file (docs/operations.md#one-process-per-sqlite-file): a second
 * `serve` on it fails to start with one line naming the first. Returns the function that lets
 * the file go; nothing to hold on PostgreSQL, which any number of instances share.
 */
function serveAlone(config: Config): () => void {
  if (config.databaseUrl || config.sqlitePath === ':memory:') return () => {};
  // A database a newer release has migrated is refused before the lock file is made: nothing
  // is written (docs/operations.md#migrations); migrate checks again as it applies.
  refuseUnknownMigrations(readMigrations('sqlite'), readSqliteMigrations(config.sqlitePath));
  try {
    return holdServeLock(resolve(config.sqlitePath));
  } catch (error) {
    if (!(error instanceof ServedElsewhere)) throw error;
    throw new StartupError(
      `cannot serve ${describeDatabase(config)}: ${error.message}; one process serves a SQLite file ` +
        `(stop that one first, or use PostgreSQL, DATABASE_URL, for several instances)`,
      { cause: error },
    );
  }
}

const listenFailures: Record<string, string> = {
  EADDRINUSE: 'the address is already in use',
  EACCES: 'permission denied',
  EADDRNOTAVAIL: 'the address is not one of this machine',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve',
};

function listenError(config: Config, error: unknown): StartupError {
  const code = (error as { code?: string }).code ?? '';
  const reason = listenFailures[code] ?? reasonOf(error);
  return new StartupError(`cannot listen on ${config.host}:${config.port} (HOST, PORT): ${reason}`, { cause: error });
}

/**
 * Takes the address before the database is touched, so that a start that cannot listen writes
 * nothing (no new file, no migration); the caller closes it right before the service listens.
 */
async function holdAddress(config: Config): Promise<Server> {
  // A client that connects meanwhile (a health probe) is let go at once: close() waits for
  // every open connection, and the start must not wait for a client.
  const holder = createServer((socket) => socket.destroy());
  try {
    await new Promise<void>((resolve, reject) => {
      holder.once('error', reject);
      holder.listen({ host: config.host, port: config.port }, resolve);
    });
  } catch (error) {
    throw listenError(config, error);
  }
  return holder;
}

function urlOf(app: FastifyInstance) {
  const { address, port } = app.server.address() as AddressInfo;
  return `http://${address.includes(':') ? `[${address}]` : address}:${port}/v1`;
}

function announceFirstKey(key: string, app: FastifyInstance, config: Config) {
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
      `More keys, in ${INSTALLED}:`,
      `    ${moreKeys(config)}`,
      '',
      '',
    ].join('\n'),
  );
}

// The folder the package is installed in (dist/ is in it), where `npx petstore` finds its bin.
const INSTALLED = fileURLToPath(new URL('..', import.meta.url)).replace(/(.)\/$/, '$1');

/**
 * The command that issues a key into this service's database: with the database's absolute
 * path, since a command run with another PETSTORE_DB (from another folder, where the default
 * names another file) puts its key where the service never looks.
 */
function moreKeys(config: Config): string {
  const command = 'npx petstore keys create --name <name>';
  if (config.databaseUrl) return `${command}   (with this service's DATABASE_URL)`;
  return `PETSTORE_DB=${resolve(config.sqlitePath)} ${command}`;
}

/**
 * Takes the address, opens the store, migrates it, listens, and issues the first key when there
 * is none. SIGTERM and SIGINT stop accepting, let in-flight requests finish, then close the
 * database. A database or an address that cannot be used throws a StartupError naming its
 * setting; an address that cannot be used is found before the database is opened.
 */
export async function serve(config: Config): Promise<{ app: FastifyInstance; store: Store }> {
  const holder = await holdAddress(config);
  let store: Store | undefined;
  let app: FastifyInstance;
  let letGo = () => {};
  try {
    // Before the store: the PostgreSQL client is instrumented as it is loaded.
    await startTracing(config);
    // Before the first migration: a second serve on the file changes nothing.
    ({ store } = await openMigratedStore(config, () => (letGo = serveAlone(config)), { readReplicas: true }));
    // docs/webhooks.md#the-relay: off on an instance that only serves the API.
    app = await buildApp({ config, store, deliverWebhooks: config.webhookDelivery });
  } catch (error) {
    // An open pool would keep the process from exiting on the error.
    await store?.close().catch(() => {});
    letGo();
    throw error;
  } finally {
    await new Promise((resolve) => holder.close(resolve));
  }
  try {
    await app.listen({ host: config.host, port: config.port });
  } catch (error) {
    await app.close();
    await store.close();
    letGo();
    throw listenError(config, error);
  }
  process.stderr.write(
    `Serving ${urlOf(app)} from ${describeDatabase(config)}; petstore ${version}, Node.js ${process.versions.node}.\n`,
  );
  // After listening: a key issued by a start that then failed would never have been shown.
  const first = await issueFirstKey(store);
  if (first) announceFirstKey(first.key, app, config);

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
    // The relay starts no new attempt from now on, and its attempts in flight get the grace
    // (docs/webhooks.md#repeats) while the requests in flight finish.
    await app.close();
    await store.close();
    letGo();
    await stopTracing(FLUSH_MS);
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  return { app, store };
}
