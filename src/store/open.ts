import type { Config } from '../config.js';
import { openSqliteStore } from './sqlite.js';
import type { Store } from './store.js';

/**
 * The store the configuration names: PostgreSQL when DATABASE_URL is set, else SQLite in a file.
 * `readReplicas`: with DATABASE_READ_URLS's replicas (the service's reads); the commands, which
 * write or list keys and endpoints on the primary, open none.
 */
export async function openStore(config: Config, { readReplicas = false } = {}): Promise<Store> {
  if (config.databaseUrl) {
    // Loaded only when used: the PostgreSQL client's modules are memory a SQLite process never needs.
    const { openPostgresStore } = await import('./postgres.js');
    return openPostgresStore(config.databaseUrl, {
      poolSize: config.pgPoolSize,
      timeoutMs: config.dbTimeoutMs,
      readUrls: readReplicas ? config.databaseReadUrls : [],
      replicaMaxLagMs: config.replicaMaxLagMs,
    });
  }
  return openSqliteStore(config.sqlitePath, { busyTimeoutMs: config.dbTimeoutMs });
}
