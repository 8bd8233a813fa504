import type Database from 'better-sqlite3';
import { toEvent, type EventRow } from './rows.js';
import type { EventPosition } from './store.js';
import {
  secretsAt,
  toAttempt,
  toEndpoint,
  ATTEMPTS_KEPT,
  type AttemptOutcome,
  type AttemptRow,
  type ClaimQuery,
  type EndpointRow,
  type NewWebhookEndpoint,
  type WebhookStore,
} from './webhooks.js';

/**
 * The `limit` deliveries to lease among `rows` (each endpoint's earliest due, in next_at order,
 * then the feed's, with `busy`, the leases it holds): endpoints take turns, the one with the
 * fewest attempts in flight first, so an endpoint that hangs or fails cannot take every slot from
 * the others; an endpoint's own deliveries keep the order of `rows`.
 */
export function inTurns<T extends { endpoint_id: bigint | number; next_at: bigint | number; busy: bigint | number }>(
  rows: T[],
  limit: number,
): T[] {
  const taken = new Map<string, number>();
  const turns = rows.map((row) => {
    const key = String(row.endpoint_id);
    const rank = (taken.get(key) ?? 0) + 1;
    taken.set(key, rank);
    return { row, turn: Number(row.busy) + rank, at: Number(row.next_at) };
  });
  turns.sort((a, b) => a.turn - b.turn || a.at - b.at);
  return turns.slice(0, limit).map(({ row }) => row);
}

// Events owed to an endpoint: its deliveries waiting, and the events after its cursor.
// A disabled endpoint is owed no event created while it is disabled (enable moves its cursor).
const WAITING =
  '(SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) + ' +
  '(CASE WHEN w.disabled_at IS NULL THEN (SELECT count(*) FROM events e WHERE e.seq > w.cursor_seq) ELSE 0 END)';
const ENDPOINT_COLUMNS =
  'w.id, w.url, w.description, w.created_at, w.disabled_at, w.last_success_at, w.last_failure_at, w.previous_until';
// The last event written: a new (or re-enabled) endpoint receives the events after it.
const LAST_SEQ = "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)";

interface ClaimRow {
  endpoint_id: bigint;
  seq: bigint;
  attempts: bigint;
  next_at: bigint;
  busy: bigint;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_until: bigint | null;
}

/**
 * The webhook half of the SQLite store. One process serves a SQLite file, so its relay is the
 * only one; the leases still make a restart after kill -9 take over what the killed process was
 * sending. `whileBusy` retries a call refused by another process's lock (a CLI command);
 * `counting` is the connection stats() reads on (sqlite.ts), `db` by default.
 */
export function sqliteWebhooks(
  db: Database.Database,
  {
    whileBusy,
    beforeWrite,
    counting = () => db,
  }: {
    whileBusy: <T>(work: () => T) => T | Promise<T>;
    beforeWrite: () => void;
    counting?: () => Database.Database;
  },
): WebhookStore {
  let prepared: ReturnType<typeof prepare> | undefined;
  const prepare = () => ({
    insert: db.prepare(
      'INSERT INTO webhook_endpoints (url, description, secret, created_at, cursor_seq) ' +
        `VALUES (?, ?, ?, ?, ${LAST_SEQ})`,
    ),
    get: db.prepare<[number | bigint], EndpointRow>(
      `SELECT ${ENDPOINT_COLUMNS}, ${WAITING} AS waiting FROM webhook_endpoints w WHERE w.id = ?`,
    ),
    list: db.prepare<[], EndpointRow>(
      `SELECT ${ENDPOINT_COLUMNS}, ${WAITING} AS waiting FROM webhook_endpoints w ORDER BY w.id`,
    ),
    remove: db.prepare('DELETE FROM webhook_endpoints WHERE id = ?'),
    removeDeliveries: db.prepare('DELETE FROM webhook_deliveries WHERE endpoint_id = ?'),
    removeAttempts: db.prepare('DELETE FROM webhook_attempts WHERE endpoint_id = ?'),
    enable: db.prepare(
      `UPDATE webhook_endpoints SET disabled_at = NULL, failing_since = NULL, cursor_seq = ${LAST_SEQ} ` +
        'WHERE id = ? AND disabled_at IS NOT NULL',
    ),
    roll: db.prepare(
      'UPDATE webhook_endpoints SET previous_secret = secret, previous_until = ?, secret = ? WHERE id = ?',
    ),
    attempts: db.prepare<[number, number], AttemptRow>(
      'SELECT endpoint_id, event_id, attempt, at, status, error, duration_ms FROM webhook_attempts ' +
        'WHERE endpoint_id = ? ORDER BY id DESC LIMIT ?',
    ),
    open: db.prepare<[number], { id: bigint; cursor_seq: bigint }>(
      'SELECT w.id, w.cursor_seq FROM webhook_endpoints w WHERE w.disabled_at IS NULL ' +
        'AND (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) < ?',
    ),
    handOut: db.prepare(
      'INSERT OR IGNORE INTO webhook_deliveries (endpoint_id, seq, attempts, next_at) ' +
        'SELECT ?, seq, 0, ? FROM events WHERE seq > ? ORDER BY seq LIMIT ?',
    ),
    lastHanded: db.prepare<[bigint, number], { seq: bigint | null }>(
      'SELECT max(seq) AS seq FROM (SELECT seq FROM events WHERE seq > ? ORDER BY seq LIMIT ?)',
    ),
    moveCursor: db.prepare('UPDATE webhook_endpoints SET cursor_seq = ? WHERE id = ?'),
    // Each enabled endpoint's earliest due deliveries, with the leases it holds now; those due at
    // the same instant in the order the feed lists them (docs/webhooks.md#the-relay). That is
    // rowid order: a hand-out copies the events after the endpoint's cursor in seq order, each
    // row a rowid above every row there, and a row keeps its rowid. It is the due index's own
    // order after next_at, so no sort is added (seq would sort every due row, per row scanned).
    due: db.prepare<[number, number, number, number], ClaimRow>(
      'SELECT d.endpoint_id, d.seq, d.attempts, d.next_at, w.url, w.secret, w.previous_secret, w.previous_until, ' +
        'coalesce(b.n, 0) AS busy FROM webhook_endpoints w ' +
        'JOIN webhook_deliveries d ON d.endpoint_id = w.id AND d.seq IN (SELECT x.seq FROM webhook_deliveries x ' +
        'WHERE x.endpoint_id = w.id AND x.next_at <= ? AND (x.lease_until IS NULL OR x.lease_until <= ?) ' +
        'ORDER BY x.next_at, x.rowid LIMIT ?) ' +
        'LEFT JOIN (SELECT endpoint_id, count(*) AS n FROM webhook_deliveries ' +
        'WHERE lease_until IS NOT NULL AND lease_until > ? GROUP BY endpoint_id) b ON b.endpoint_id = w.id ' +
        'WHERE w.disabled_at IS NULL ORDER BY d.endpoint_id, d.next_at, d.rowid',
    ),
    lease: db.prepare(
      'UPDATE webhook_deliveries SET lease_until = ?, lease_owner = ?, attempts = attempts + 1 ' +
        'WHERE endpoint_id = ? AND seq = ?',
    ),
    event: db.prepare<[bigint], EventRow>('SELECT 0 AS tx, seq, type, created_at, data FROM events WHERE seq = ?'),
    // Not for an endpoint removed while the attempt was in flight.
    insertAttempt: db.prepare(
      'INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, at, status, error, duration_ms) ' +
        'SELECT id, ?, ?, ?, ?, ?, ? FROM webhook_endpoints WHERE id = ?',
    ),
    pruneAttempts: db.prepare(
      'DELETE FROM webhook_attempts WHERE endpoint_id = ? AND id <= ' +
        `(SELECT id FROM webhook_attempts WHERE endpoint_id = ? ORDER BY id DESC LIMIT 1 OFFSET ${ATTEMPTS_KEPT})`,
    ),
    done: db.prepare('DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND seq = ?'),
    retry: db.prepare(
      'UPDATE webhook_deliveries SET next_at = ?, lease_until = NULL, lease_owner = NULL WHERE endpoint_id = ? AND seq = ?',
    ),
    releaseAll: db.prepare(
      'UPDATE webhook_deliveries SET lease_until = NULL, lease_owner = NULL WHERE lease_until IS NOT NULL',
    ),
    release: db.prepare(
      'UPDATE webhook_deliveries SET lease_until = NULL, lease_owner = NULL ' +
        'WHERE endpoint_id = ? AND seq = ? AND lease_owner = ?',
    ),
    succeeded: db.prepare('UPDATE webhook_endpoints SET last_success_at = ?, failing_since = NULL WHERE id = ?'),
    failed: db.prepare(
      'UPDATE webhook_endpoints SET last_failure_at = ?, failing_since = coalesce(failing_since, ?) WHERE id = ?',
    ),
    disable: db.prepare(
      'UPDATE webhook_endpoints SET disabled_at = ? WHERE id = ? AND disabled_at IS NULL ' +
        'AND coalesce(last_success_at, -1) < ? AND (failing_since <= ? OR ?)',
    ),
  });
  type StatsRow = { waiting: bigint | null; oldest: string | null; disabled: bigint };
  // On the counting connection: the count reads every event waiting (sqlite.ts, counting).
  let statsStatement: Database.Statement<[], StatsRow> | undefined;
  const statsOf = () =>
    (statsStatement ??= counting().prepare<[], StatsRow>(
      `SELECT sum(CASE WHEN w.disabled_at IS NULL THEN ${WAITING} ELSE 0 END) AS waiting, ` +
        'min(CASE WHEN w.disabled_at IS NULL THEN min(' +
        "  coalesce((SELECT min(e.created_at) FROM webhook_deliveries d JOIN events e ON e.seq = d.seq WHERE d.endpoint_id = w.id), '~'), " +
        "  coalesce((SELECT e.created_at FROM events e WHERE e.seq > w.cursor_seq ORDER BY e.seq LIMIT 1), '~')) END) AS oldest, " +
        'count(w.disabled_at) AS disabled FROM webhook_endpoints w',
    ));
  const s = () => (prepared ??= prepare());
  const write = <T>(work: () => T) =>
    whileBusy(() => {
      beforeWrite();
      return db.transaction(work).immediate();
    });
  // The relay's own bookkeeping (hand-outs, leases, outcomes) commits without waiting for the
  // disk (synchronous = NORMAL, for its transaction alone): it survives a kill -9 as any commit
  // does, since the operating system holds the WAL, and a power loss can only forget the last
  // of it, which then makes an attempt again. At least once still holds, and the relay never
  // makes the API's commits wait behind an fsync of its own (docs/webhooks.md#the-relay).
  const background = <T>(work: () => T) =>
    whileBusy(() => {
      beforeWrite();
      // Outside the transaction: SQLite refuses to change it inside one.
      db.pragma('synchronous = NORMAL');
      try {
        return db.transaction(work).immediate();
      } finally {
        db.pragma('synchronous = FULL');
      }
    });

  return {
    async addEndpoint({ url, description, secret, createdAt }: NewWebhookEndpoint) {
      return write(() => {
        const { lastInsertRowid } = s().insert.run(url, description, secret, createdAt);
        return toEndpoint(s().get.get(lastInsertRowid)!);
      });
    },
    async listEndpoints() {
      return whileBusy(() => s().list.all().map(toEndpoint));
    },
    async removeEndpoint(id: number) {
      return write(() => {
        s().removeDeliveries.run(id);
        s().removeAttempts.run(id);
        return s().remove.run(id).changes > 0;
      });
    },
    async enableEndpoint(id: number) {
      return write(() => {
        if (s().enable.run(id).changes > 0) return 'enabled' as const;
        return s().get.get(id) ? ('already' as const) : ('unknown' as const);
      });
    },
    async rollSecret(id: number, secret: string, previousUntil: number) {
      return write(() => s().roll.run(previousUntil, secret, id).changes > 0);
    },
    async listAttempts(id: number, limit: number) {
      return whileBusy(() => (s().get.get(id) ? s().attempts.all(id, limit).map(toAttempt) : undefined));
    },
    async handOut(now: number, batch: number, window: number) {
      return background(() => {
        let copied = 0;
        for (const { id, cursor_seq } of s().open.all(window)) {
          const last = s().lastHanded.get(cursor_seq, batch)?.seq;
          if (last === null || last === undefined) continue;
          copied += s().handOut.run(id, now, cursor_seq, batch).changes;
          s().moveCursor.run(last, id);
        }
        return copied;
      });
    },
    async claim({ now, limit, leaseMs, owner }: ClaimQuery) {
      return background(() =>
        inTurns(s().due.all(now, now, limit, now), limit).map((row) => {
          s().lease.run(now + leaseMs, owner, row.endpoint_id, row.seq);
          const event = s().event.get(row.seq);
          return {
            endpointId: Number(row.endpoint_id),
            url: row.url,
            secrets: secretsAt(now, row.secret, row.previous_secret, row.previous_until),
            position: { tx: 0n, seq: row.seq },
            event: event && toEvent(event),
            attempt: Number(row.attempts) + 1,
          };
        }),
      );
    },
    async finish(outcomes: AttemptOutcome[]) {
      return background(() =>
        outcomes.map(({ record, position, ok, retryAt, disableUnlessSuccessSince: since }) => {
          const at = record.at.getTime();
          const { endpointId: id } = record;
          s().insertAttempt.run(record.eventId, record.attempt, at, record.status, record.error, record.durationMs, id);
          s().pruneAttempts.run(id, id);
          if (ok || retryAt === undefined) s().done.run(id, position.seq);
          else s().retry.run(retryAt, id, position.seq);
          if (ok) {
            s().succeeded.run(at, id);
            return false;
          }
          s().failed.run(at, at, id);
          return s().disable.run(at, id, since, since, retryAt === undefined ? 1 : 0).changes > 0;
        }),
      );
    },
    async recover() {
      await background(() => s().releaseAll.run());
    },
    async release(endpointId: number, position: EventPosition, owner: string) {
      await background(() => s().release.run(endpointId, position.seq, owner));
    },
    async stats() {
      return whileBusy(() => {
        const row = statsOf().get()!;
        return {
          waiting: Number(row.waiting ?? 0),
          oldestWaitingAt: row.oldest === null || row.oldest === '~' ? null : new Date(row.oldest),
          disabled: Number(row.disabled),
        };
      });
    },
  };
}
