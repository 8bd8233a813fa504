import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { LIST_ALL, LIST_BY_STATUS } from '../src/store/sqlite.js';
import { tempSqliteStore } from './helpers.js';

// SQLite compiles a statement again on every call when a parameter it plans with is bound anew
// (see LIST_ALL). Nothing outside SQLite shows a recompilation, so these tests pin the two
// things that keep it away: no bare `?` where the planner reads it, and the plan unchanged.
const PLANNED_PARAMETER = /LIMIT\s+\?|status\s*=\s*\?/i;

async function migratedReader(t: TestContext) {
  const { path } = await tempSqliteStore(t);
  const db = new Database(path, { readonly: true });
  t.after(() => db.close());
  return db;
}

test('the page queries leave no parameter SQLite plans with bare, so each is compiled once', () => {
  for (const sql of [LIST_ALL, LIST_BY_STATUS]) assert.doesNotMatch(sql, PLANNED_PARAMETER, sql);
  // The guard itself sees the form it forbids.
  assert.match('SELECT id FROM pets WHERE status = ? AND id > ? ORDER BY id LIMIT ?', PLANNED_PARAMETER);
});

test('the page queries keep the plan of their bare-parameter form: a keyset search, no sort', async (t) => {
  const db = await migratedReader(t);
  const plan = (sql: string, args: unknown[]) =>
    db
      .prepare(`EXPLAIN QUERY PLAN ${sql}`)
      .all(...args)
      .map((row) => (row as { detail: string }).detail);
  const bare = (sql: string) => sql.replaceAll('+?', '?');
  const all = plan(LIST_ALL, [5n, 21]);
  assert.deepEqual(all, plan(bare(LIST_ALL), [5n, 21]));
  assert.match(all.join('; '), /SEARCH pets USING INTEGER PRIMARY KEY \(rowid>\?\)/);
  const byStatus = plan(LIST_BY_STATUS, ['sold', 5n, 21]);
  assert.deepEqual(byStatus, plan(bare(LIST_BY_STATUS), ['sold', 5n, 21]));
  assert.match(byStatus.join('; '), /SEARCH pets USING INDEX pets_status_id \(status=\? AND id>\?\)/);
  for (const detail of [...all, ...byStatus]) assert.doesNotMatch(detail, /TEMP B-TREE/);
});
