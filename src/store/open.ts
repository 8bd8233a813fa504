import type { Config } from '../config.js';
import { openSqliteStore } from './sqlite.js';
import type { Store } from './store.js';

/** The store the configuration names: SQLite in a file by default. */
export async function openStore(config: Config): Promise<Store> {
  return openSqliteStore(config.sqlitePath);
}
