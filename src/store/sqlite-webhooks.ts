import type Database from 'better-sqlite3';
import { toEvent, type EventRow } from './rows.js';
import type { EventPosition } from './store.js';
import {
  laterOf,
  REPLAY_BATCH,
  replayInBatches,
  type AttemptOutcome,
  type ClaimQuery,
  type NewWebhookEndpoint,
  type ReplayFrom,
  type ReplayOutcome,
  type ResendOutcome,
  type ResendRefusal,
  type SigningTarget,
  type WebhookAttemptRecord,
  type WebhookEndpointRecord,
  type WebhookStore,
  type WebhookTools,
} from './webhooks.js';

type Int = bigint | number | null;

/** A `webhook_endpoints` row with its waiting count, as both stores read it. */
export interface EndpointRow {
  id: Int;
  url: string;
  description: string;
  created_at: Int;
  disabled_at: Int;
  last_success_at: Int;
  last_failure_at: Int;
  previous_until: Int;
  waiting: Int;
}

export interface AttemptRow {
  endpoint_id: Int;
  event_id: string;
  attempt: Int;
  at: Int;
  status: Int;
  error: string | null;
  duration_ms: Int;
}

const date = (ms: Int) => (ms === null ? null : new Date(Number(ms)));

export const toEndpoint = (row: EndpointRow): WebhookEndpointRecord => ({
  id: Number(row.id),
  url: row.url,
  description: row.description,
  createdAt: new Date(Number(row.created_at)),
  disabledAt: date(row.disabled_at),
  lastSuccessAt: date(row.last_success_at),
  lastFailureAt: date(row.last_failure_at),
  previousSecretUntil: date(row.previous_until),
  waiting: Number(row.waiting ?? 0),
});

export const toAttempt = (row: AttemptRow): WebhookAttemptRecord => ({
  endpointId: Number(row.endpoint_id),
  eventId: row.event_id,
  attempt: Number(row.attempt),
  at: new Date(Number(row.at)),
  status: row.status === null ? null : Number(row.status),
  error: row.error,
  durationMs: Number(row.duration_ms),
});

/** The secrets to sign with at `now`: the current one, and the replaced one while its grace lasts. */
export function secretsAt(now: number, secret: string, previous: string | null, until: Int): string[] {
  return previous !== null && until !== null && Number(until) > now ? [secret, previous] : [secret];
}

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

/** Attempts kept per endpoint for `webhooks deliveries`. */
export const ATTEMPTS_KEPT = 100;

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
    ...sqliteWebhookTools(db, write, whileBusy),
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

/** Runs `work` in a write transaction of its own, retried while another process holds the lock. */
type Write = <T>(work: () => T) => T | Promise<T>;

type Int64 = bigint | number;

/**
 * `webhooks test`, `resend` and `replay` on SQLite (docs/webhooks.md#sending-again): statements
 * a command prepares when it runs, in transactions of their own, beside the serving process,
 * whose relay then sends what they made due.
 */
export function sqliteWebhookTools(
  db: Database.Database,
  write: Write,
  whileBusy: <T>(work: () => T) => T | Promise<T>,
): WebhookTools {
  return {
    signingTarget: async (id, now) => whileBusy(() => sqliteSigningTarget(db, id, now)),
    resend: async (endpointId, position, now) => write(() => sqliteResend(db, endpointId, position, now)),
    replay: (endpointId, from, now) => sqliteReplay(db, write, whileBusy, endpointId, from, now),
  };
}

function sqliteSigningTarget(db: Database.Database, id: number, now: number): SigningTarget | undefined {
  const row = db
    .prepare<
      [number],
      { url: string; secret: string; previous_secret: string | null; previous_until: Int; disabled_at: Int }
    >('SELECT url, secret, previous_secret, previous_until, disabled_at FROM webhook_endpoints WHERE id = ?')
    .get(id);
  if (!row) return undefined;
  const secrets = secretsAt(now, row.secret, row.previous_secret, row.previous_until);
  return { url: row.url, secrets, disabled: row.disabled_at !== null };
}

/** The endpoint's cursor, or why nothing may be sent to it again (none has this id, or it is disabled). */
function sqliteEndpointCursor(db: Database.Database, id: number): { cursor: bigint } | ResendRefusal {
  const row = db
    .prepare<[number], { cursor_seq: Int64; disabled_at: Int }>(
      'SELECT cursor_seq, disabled_at FROM webhook_endpoints WHERE id = ?',
    )
    .get(id);
  if (!row) return { kind: 'unknown_endpoint' };
  return row.disabled_at === null ? { cursor: BigInt(row.cursor_seq) } : { kind: 'disabled' };
}

/**
 * Undefined when the event at `position` is kept; else whether it was deleted (before the
 * oldest kept, and given out here: retention) or never was.
 */
function sqliteMissingEvent(db: Database.Database, { tx, seq }: EventPosition): ResendRefusal | undefined {
  // Writers take turns: every event here has tx 0.
  if (tx !== 0n) return { kind: 'unknown_event' };
  if (db.prepare('SELECT 1 FROM events WHERE seq = ?').get(seq)) return undefined;
  const { oldest, last } = db
    .prepare<[], { oldest: Int; last: Int64 }>(`SELECT min(seq) AS oldest, ${LAST_SEQ} AS last FROM events`)
    .get()!;
  const deleted = seq <= BigInt(last) && (oldest === null || seq < BigInt(oldest));
  return { kind: deleted ? 'expired_event' : 'unknown_event' };
}

function sqliteResend(db: Database.Database, endpointId: number, position: EventPosition, now: number): ResendOutcome {
  const endpoint = sqliteEndpointCursor(db, endpointId);
  if ('kind' in endpoint) return endpoint;
  const missing = sqliteMissingEvent(db, position);
  if (missing) return missing;
  const waiting = db
    .prepare<[number, bigint], { lease_until: Int }>(
      'SELECT lease_until FROM webhook_deliveries WHERE endpoint_id = ? AND seq = ?',
    )
    .get(endpointId, position.seq);
  if (!waiting) {
    db.prepare('INSERT INTO webhook_deliveries (endpoint_id, seq, attempts, next_at) VALUES (?, ?, 0, ?)').run(
      endpointId,
      position.seq,
      now,
    );
    return { kind: 'due', before: 'none' };
  }
  if (waiting.lease_until !== null && Number(waiting.lease_until) > now) return { kind: 'due', before: 'in_flight' };
  db.prepare('UPDATE webhook_deliveries SET next_at = ? WHERE endpoint_id = ? AND seq = ?').run(
    now,
    endpointId,
    position.seq,
  );
  return { kind: 'due', before: 'waiting' };
}

// A replay's batch: the next REPLAY_BATCH events after @after up to the endpoint's cursor, created
// at or after @since (ISO 8601 text in UTC sorts as time does; '' for any time).
const REPLAY_EVENTS =
  'SELECT seq FROM events WHERE seq > @after AND seq <= @cursor AND created_at >= @since ORDER BY seq LIMIT @limit';

interface ReplayBinding {
  after: bigint;
  cursor: bigint;
  since: string;
  limit: number;
}

async function sqliteReplay(
  db: Database.Database,
  write: Write,
  whileBusy: <T>(work: () => T) => T | Promise<T>,
  endpointId: number,
  from: ReplayFrom,
  now: number,
): Promise<ReplayOutcome> {
  const begun = await write(() => {
    const endpoint = sqliteEndpointCursor(db, endpointId);
    if ('kind' in endpoint || !('after' in from)) return endpoint;
    return sqliteMissingEvent(db, from.after) ?? endpoint;
  });
  if ('kind' in begun) return begun;
  const start = 'after' in from ? from.after : { tx: 0n, seq: 0n };
  const since = 'since' in from ? from.since.toISOString() : '';
  // The rows go in the feed's order, so the relay sends them oldest first (rowid order: see due).
  // Not for an endpoint disabled or removed meanwhile.
  const insert = db.prepare<[ReplayBinding & { endpoint: number; now: number }]>(
    'INSERT OR IGNORE INTO webhook_deliveries (endpoint_id, seq, attempts, next_at) ' +
      `SELECT w.id, e.seq, 0, @now FROM (${REPLAY_EVENTS}) e, webhook_endpoints w ` +
      'WHERE w.id = @endpoint AND w.disabled_at IS NULL ORDER BY e.seq',
  );
  const batchOf = db.prepare<[ReplayBinding], { events: Int64; last: Int }>(
    `SELECT count(*) AS events, max(seq) AS last FROM (${REPLAY_EVENTS})`,
  );
  const { events, due } = await replayInBatches(start, async (after) =>
    write(() => {
      const binding = { after: after.seq, cursor: begun.cursor, since, limit: REPLAY_BATCH };
      const batch = batchOf.get(binding)!;
      return {
        events: Number(batch.events),
        due: insert.run({ ...binding, endpoint: endpointId, now }).changes,
        last: batch.last === null ? undefined : { tx: 0n, seq: BigInt(batch.last) },
      };
    }),
  );
  // Those after the cursor: the relay hands them out as it does every new event.
  const later = await whileBusy(() =>
    db
      .prepare<[bigint, string], Int64>('SELECT count(*) FROM events WHERE seq > ? AND created_at >= ?')
      .pluck()
      .get(laterOf(start, { tx: 0n, seq: begun.cursor }).seq, since)!,
  );
  return { kind: 'replayed', due, waiting: events - due + Number(later) };
}
