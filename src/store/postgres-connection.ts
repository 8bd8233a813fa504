import pg from 'pg';
import { StoreUnavailableError } from './store.js';

const INT8_OID = 20;

// int8 as BigInt on this store's connections only: pg's own default is a string, and a
// process-global override would change every other pg user in the process.
const exactTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
    if (oid === INT8_OID && format !== 'binary') return (value: string) => BigInt(value);
    return pg.types.getTypeParser(oid, format);
  }) as typeof pg.types.getTypeParser,
};

/** How much later than the server's statement_timeout the client gives up on a statement. */
export const CLIENT_GRACE_MS = 500;

export const ignore = () => {};

/** A statement the store sends by name (prepared once per connection). */
export interface Statement {
  name: string;
  text: string;
  /** It changes nothing (or only a rate-limit count), so it may be sent twice. */
  retried?: boolean;
}

const isConnectionLost = (error: unknown) =>
  error instanceof Error &&
  (error.message === 'Connection terminated unexpectedly' ||
    ['ECONNRESET', 'EPIPE'].includes(String((error as { code?: unknown }).code)));

// SQLSTATE classes and codes that mean "the database is not answering", not "the request is wrong":
// 08 connection exception, 53 insufficient resources (too many connections), 57P01..57P03
// shutdown or starting up, 57014 cancelled by statement_timeout, 58000 and 58030 system and I/O errors.
const UNAVAILABLE_SQLSTATE = /^(08[0-9A-Z]{3}|53[0-9A-Z]{3}|57P0[1-3]|57014|58000|58030)$/;
const UNAVAILABLE_NODE_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'EHOSTDOWN',
  'ENETUNREACH',
  'ENETDOWN',
  'ENOTFOUND',
  'EAI_AGAIN',
]);
// pg and pg-pool raise these without a code when a connection is lost or too slow.
const UNAVAILABLE_MESSAGES = [
  'Connection terminated',
  'timeout exceeded when trying to connect',
  'Query read timeout',
  'Client has encountered a connection error',
  'Client was closed',
];

/** True when `error` says the database did not answer (refused, dropped, too slow), not that a statement was wrong. */
export function isUnavailable(error: unknown, depth = 0): boolean {
  if (!(error instanceof Error) || depth > 3) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (UNAVAILABLE_SQLSTATE.test(code) || UNAVAILABLE_NODE_CODES.has(code))) return true;
  if (UNAVAILABLE_MESSAGES.some((start) => error.message.startsWith(start))) return true;
  // Node's happy-eyeballs connect reports one failure per address in an AggregateError.
  if (error instanceof AggregateError && error.errors.some((inner) => isUnavailable(inner, depth + 1))) return true;
  return isUnavailable(error.cause, depth + 1);
}

/** `error`, as StoreUnavailableError when it says the database did not answer. */
export function translate(error: unknown): unknown {
  return !(error instanceof StoreUnavailableError) && isUnavailable(error) ? new StoreUnavailableError(error) : error;
}

/**
 * `url` with `-c jit=off` added to its libpq options, those it has kept: the service's
 * connections run without JIT. Its statements are short, and where the planner overestimates one
 * (the counts of events waiting, with a backlog: docs/webhooks.md#the-relay), compiling it took far
 * longer than running it.
 *
 * @example withJitOff('postgres://db/petstore?options=-c%20search_path%3Dshop')
 * // 'postgres://db/petstore?options=-c+search_path%3Dshop+-c+jit%3Doff'
 */
export function withJitOff(url: string): string {
  const parsed = new URL(url);
  const options = parsed.searchParams.get('options');
  parsed.searchParams.set('options', options ? `${options} -c jit=off` : '-c jit=off');
  return parsed.href;
}

/**
 * The database a URL names, as logs, /readyz and /metrics show it: `host:port/database`, with no
 * user name, password or parameter (a parameter may hold a password).
 *
 * @example databaseName('postgres://app:secret@db.internal/shop?sslmode=require') // 'db.internal:5432/shop'
 */
export function databaseName(url: string): string {
  try {
    const parsed = new URL(url);
    const database = decodeURIComponent(parsed.pathname.slice(1));
    return `${parsed.hostname || 'localhost'}:${parsed.port || '5432'}/${database || '(default)'}`;
  } catch {
    return '(a URL that does not parse)';
  }
}

/** The settings of every connection the service opens to `url`, each statement bounded by `timeoutMs`. */
export function connectionConfig(url: string, timeoutMs: number): pg.ClientConfig {
  return {
    connectionString: withJitOff(url),
    types: exactTypes,
    application_name: 'petstore',
    connectionTimeoutMillis: timeoutMs,
    // Server side, so a slow statement stops using the database and the connection stays usable;
    // client side a little later, so a server gone silent (no RST, no FIN) cannot hold a request
    // much past the bound either.
    statement_timeout: timeoutMs,
    query_timeout: timeoutMs + CLIENT_GRACE_MS,
    idle_in_transaction_session_timeout: timeoutMs * 2,
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  };
}

/** A pool of connections to one PostgreSQL server, and the ways the store uses it. */
export interface PostgresConnection {
  /** What each of its connections is opened with (migrations open one of their own from it). */
  readonly config: pg.ClientConfig;
  readonly pool: pg.Pool;
  /**
   * Sends `statement` on `client`, else on a pooled connection. Failures that say the database
   * did not answer reject with StoreUnavailableError; a statement that may be sent twice
   * (`retried`) is sent once more, on another connection, when an idle pooled one was lost.
   */
  query<R extends pg.QueryResultRow>(
    statement: Statement,
    values?: unknown[],
    client?: pg.PoolClient,
  ): Promise<pg.QueryResult<R>>;
  /** `run` inside BEGIN … COMMIT on one connection; rolled back when it throws. */
  inTransaction<T>(run: (client: pg.PoolClient) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

/**
 * A pool of at most `poolSize` connections to `url`, opened lazily: opening never fails, the
 * first statement might.
 */
export function connectPostgres(url: string, { poolSize, timeoutMs }: { poolSize: number; timeoutMs: number }) {
  const config = connectionConfig(url, timeoutMs);
  const pool = new pg.Pool({ ...config, max: poolSize });
  // A connection that fails while idle is dropped from the pool and replaced on the next query;
  // without a listener, the 'error' event would end the process.
  pool.on('error', ignore);

  async function query<R extends pg.QueryResultRow>(
    statement: Statement,
    values: unknown[] = [],
    client?: pg.PoolClient,
  ) {
    const { name, text } = statement;
    try {
      return await (client ?? pool).query<R>({ name, text, values });
    } catch (error) {
      // An idle pooled connection the server closed (restart, failover) fails the first statement
      // sent on it; a read is sent once more, on another connection.
      if (client || !statement.retried || !isConnectionLost(error)) throw translate(error);
      try {
        return await pool.query<R>({ name, text, values });
      } catch (retryError) {
        throw translate(retryError);
      }
    }
  }

  async function inTransaction<T>(run: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    let client: pg.PoolClient;
    try {
      client = await pool.connect();
    } catch (error) {
      throw translate(error);
    }
    // pg-pool listens for errors only on idle clients; a checked-out one needs its own listener.
    client.on('error', ignore);
    let broken: Error | undefined;
    try {
      await client.query('BEGIN');
      const result = await run(client);
      await client.query('COMMIT');
      return result;
    } catch (error) {
      const translated = translate(error);
      if (translated instanceof StoreUnavailableError) broken = translated;
      else await client.query('ROLLBACK').catch((rollbackError: Error) => void (broken = rollbackError));
      throw translated;
    } finally {
      client.removeListener('error', ignore);
      // A broken connection (or one whose statement may still be running) is destroyed, not reused.
      client.release(broken);
    }
  }

  let closed: Promise<void> | undefined;
  const connection: PostgresConnection = {
    config,
    pool,
    query,
    inTransaction,
    close: () => (closed ??= pool.end()),
  };
  return connection;
}
