import type Database from 'better-sqlite3';
import { toEvent, type EventRow } from './rows.js';
import type { EventPosition } from './store.js';
import {
  endpointAfterOutcomes,
  laterOf,
  REPLAY_BATCH,
  replayInBatches,
  secretsAt,
  toAttempt,
  toEndpoint,
  toEndpointState,
  ATTEMPTS_KEPT,
  type AttemptOutcome,
  type AttemptRow,
  type ClaimedDelivery,
  type ClaimQuery,
  type DeliveryWant,
  type EndpointRow,
  type EndpointStateRow,
  type FinishQuery,
  type FinishResult,
  type NewWebhookEndpoint,
  type RelayEndpoint,
  type ReplayFrom,
  type ReplayOutcome,
  type ResendOutcome,
  type ResendRefusal,
  type SigningTarget,
  type WebhookStore,
  type WebhookTools,
} from './webhooks.js';

// Events owed to an endpoint: its deliveries waiting, and the events after its cursor.
// A disabled endpoint is owed no event created while it is disabled (enable moves its cursor).
const WAITING =
  '(SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) + ' +
  '(CASE WHEN w.disabled_at IS NULL THEN (SELECT count(*) FROM events e WHERE e.seq > w.cursor_seq) ELSE 0 END)';
const ENDPOINT_COLUMNS =
  'w.id, w.url, w.description, w.created_at, w.disabled_at, w.last_success_at, w.last_failure_at, w.previous_until';
// The last event written: a new (or re-enabled) endpoint receives the events after it.
const LAST_SEQ = "coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0)";
const STATE_COLUMNS = 'failures, probe_at, last_success_at, last_failure_at, failing_since, disabled_at';
// Not leased, or leased by a relay whose lease has expired.
const FREE = '(lease_until IS NULL OR lease_until <= ?)';

interface ClaimEndpointRow {
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_until: bigint | null;
  cursor_seq: bigint;
  probe_at: bigint | null;
}

interface DueRow {
  seq: bigint;
  attempts: bigint;
}

/** The statements, compiled once the schema is there (after migrate). */
function prepare(db: Database.Database) {
  return {
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
      'UPDATE webhook_endpoints SET disabled_at = NULL, failing_since = NULL, failures = 0, probe_at = NULL, ' +
        `cursor_seq = ${LAST_SEQ} WHERE id = ? AND disabled_at IS NOT NULL`,
    ),
    roll: db.prepare(
      'UPDATE webhook_endpoints SET previous_secret = secret, previous_until = ?, secret = ? WHERE id = ?',
    ),
    attempts: db.prepare<[number, number], AttemptRow>(
      'SELECT endpoint_id, event_id, attempt, at, status, error, duration_ms FROM webhook_attempts ' +
        'WHERE endpoint_id = ? ORDER BY id DESC LIMIT ?',
    ),
    relayEndpoints: db.prepare<[], { id: bigint; failures: bigint; probe_at: bigint | null; succeeded: bigint }>(
      'SELECT id, failures, probe_at, last_success_at IS NOT NULL AS succeeded FROM webhook_endpoints ' +
        'WHERE disabled_at IS NULL',
    ),
    claimEndpoint: db.prepare<[number], ClaimEndpointRow>(
      'SELECT url, secret, previous_secret, previous_until, cursor_seq, probe_at FROM webhook_endpoints ' +
        'WHERE id = ? AND disabled_at IS NULL',
    ),
    lastHanded: db.prepare<[bigint, number], { seq: bigint | null }>(
      'SELECT max(seq) AS seq FROM (SELECT seq FROM events WHERE seq > ? ORDER BY seq LIMIT ?)',
    ),
    handOut: db.prepare(
      'INSERT OR IGNORE INTO webhook_deliveries (endpoint_id, seq, attempts, next_at) ' +
        'SELECT ?, seq, 0, ? FROM events WHERE seq > ? AND seq <= ? ORDER BY seq',
    ),
    moveCursor: db.prepare('UPDATE webhook_endpoints SET cursor_seq = ? WHERE id = ?'),
    // An endpoint's deliveries due, those due at the same instant in the order the feed lists
    // them (docs/webhooks.md#the-relay). That is rowid order: a hand-out copies the events after
    // the endpoint's cursor in seq order, each row a rowid above every row there, and a row keeps
    // its rowid. It is the due index's own order after next_at, so no sort is added.
    due: db.prepare<[number, number, number, number], DueRow>(
      'SELECT seq, attempts FROM webhook_deliveries ' +
        `WHERE endpoint_id = ? AND next_at <= ? AND ${FREE} ORDER BY next_at, rowid LIMIT ?`,
    ),
    // A probe: the oldest delivery waiting, in the feed's order (the primary key's), whenever due.
    oldest: db.prepare<[number, number], DueRow>(
      `SELECT seq, attempts FROM webhook_deliveries WHERE endpoint_id = ? AND ${FREE} ORDER BY seq LIMIT 1`,
    ),
    takeProbe: db.prepare('UPDATE webhook_endpoints SET probe_at = ? WHERE id = ?'),
    lease: db.prepare(
      'UPDATE webhook_deliveries SET lease_until = ?, lease_owner = ?, attempts = attempts + 1 ' +
        'WHERE endpoint_id = ? AND seq = ?',
    ),
    event: db.prepare<[bigint], EventRow>('SELECT 0 AS tx, seq, type, created_at, data FROM events WHERE seq = ?'),
    held: db.prepare<[number, bigint, string], { held: bigint }>(
      'SELECT 1 AS held FROM webhook_deliveries WHERE endpoint_id = ? AND seq = ? AND lease_owner = ?',
    ),
    insertAttempt: db.prepare(
      'INSERT INTO webhook_attempts (endpoint_id, event_id, seq, attempt, at, status, error, duration_ms) ' +
        'VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
    ),
    // The attempts beyond the endpoint's last ATTEMPTS_KEPT, except those of events still waiting for it.
    pruneAttempts: db.prepare<[number, number]>(
      'DELETE FROM webhook_attempts WHERE endpoint_id = ? AND id <= ' +
        `(SELECT id FROM webhook_attempts WHERE endpoint_id = ? ORDER BY id DESC LIMIT 1 OFFSET ${ATTEMPTS_KEPT}) ` +
        'AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d ' +
        'WHERE d.endpoint_id = webhook_attempts.endpoint_id AND d.seq = webhook_attempts.seq)',
    ),
    done: db.prepare('DELETE FROM webhook_deliveries WHERE endpoint_id = ? AND seq = ? AND lease_owner = ?'),
    retry: db.prepare(
      'UPDATE webhook_deliveries SET next_at = ?, lease_until = NULL, lease_owner = NULL ' +
        'WHERE endpoint_id = ? AND seq = ? AND lease_owner = ?',
    ),
    state: db.prepare<[number], EndpointStateRow>(`SELECT ${STATE_COLUMNS} FROM webhook_endpoints WHERE id = ?`),
    writeState: db.prepare(
      'UPDATE webhook_endpoints SET failures = ?, probe_at = ?, last_success_at = ?, last_failure_at = ?, ' +
        'failing_since = ?, disabled_at = ? WHERE id = ?',
    ),
    release: db.prepare<[number, number, number, number]>(
      `UPDATE webhook_deliveries SET next_at = ? WHERE endpoint_id = ? AND next_at <> ? AND ${FREE}`,
    ),
    releaseAll: db.prepare(
      'UPDATE webhook_deliveries SET lease_until = NULL, lease_owner = NULL WHERE lease_until IS NOT NULL',
    ),
  };
}

type Statements = ReturnType<typeof prepare>;

/**
 * The webhook half of the SQLite store. One process serves a SQLite file (`petstore serve`
 * refuses a second), so its relay is the only one; the leases still make a restart after kill -9
 * take over what the killed process was sending. `whileBusy` retries a call refused by another
 * process's lock (a CLI command); `counting` is the connection stats() reads on (sqlite.ts),
 * `db` by default; `eventsWritten` hears of each commit of this process that wrote events.
 */
export function sqliteWebhooks(
  db: Database.Database,
  {
    whileBusy,
    beforeWrite,
    counting = () => db,
    eventsWritten,
  }: {
    whileBusy: <T>(work: () => T) => T | Promise<T>;
    beforeWrite: () => void;
    counting?: () => Database.Database;
    eventsWritten: (listener: () => void) => () => void;
  },
): WebhookStore {
  let prepared: Statements | undefined;
  const s = () => (prepared ??= prepare(db));
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
    ...endpointCommands(s, write, whileBusy),
    ...sqliteWebhookTools(db, write, whileBusy),
    async relayEndpoints() {
      return whileBusy(() => s().relayEndpoints.all().map(toRelayEndpoint));
    },
    async claim(query: ClaimQuery) {
      return background(() => query.wants.flatMap((want) => claimFor(s(), want, query)));
    },
    async finish(query: FinishQuery) {
      return background(() => finishAll(s(), query));
    },
    async recover() {
      await background(() => s().releaseAll.run());
    },
    onEventsWritten(listener: () => void) {
      const stop = eventsWritten(listener);
      return async () => stop();
    },
    stats: statsOn(counting, whileBusy),
  };
}

const toRelayEndpoint = (row: {
  id: bigint;
  failures: bigint;
  probe_at: bigint | null;
  succeeded: bigint;
}): RelayEndpoint => ({
  id: Number(row.id),
  failures: Number(row.failures),
  probeAt: row.probe_at === null ? null : Number(row.probe_at),
  succeeded: row.succeeded === 1n,
});

/** What `petstore webhooks` does to endpoints. */
function endpointCommands(
  s: () => Statements,
  write: <T>(work: () => T) => T | Promise<T>,
  whileBusy: <T>(work: () => T) => T | Promise<T>,
) {
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
  };
}

/** Copies up to `batch` events after the endpoint's cursor into its deliveries, due at `now`. */
function handOut(s: Statements, id: number, cursor: bigint, batch: number, now: number): boolean {
  const last = s.lastHanded.get(cursor, batch)?.seq;
  if (last === null || last === undefined) return false;
  s.handOut.run(id, now, cursor, last);
  s.moveCursor.run(last, id);
  return true;
}

/** The deliveries of one endpoint a claim leases (see WebhookStore.claim). */
function claimFor(s: Statements, { endpointId: id, count, probe }: DeliveryWant, query: ClaimQuery): ClaimedDelivery[] {
  const { now, leaseMs, owner, batch } = query;
  const endpoint = s.claimEndpoint.get(id);
  if (!endpoint || count <= 0) return [];
  if (probe && endpoint.probe_at !== null && Number(endpoint.probe_at) > now) return [];
  const take = () => (probe ? s.oldest.all(id, now) : s.due.all(id, now, now, count));
  let rows = take();
  if (rows.length < count && handOut(s, id, endpoint.cursor_seq, Math.max(batch, count), now)) rows = take();
  if (probe && rows.length > 0) s.takeProbe.run(now + leaseMs, id);
  const secrets = secretsAt(now, endpoint.secret, endpoint.previous_secret, endpoint.previous_until);
  return rows.map((row) => {
    s.lease.run(now + leaseMs, owner, id, row.seq);
    const event = s.event.get(row.seq);
    return {
      endpointId: id,
      url: endpoint.url,
      secrets,
      position: { tx: 0n, seq: row.seq },
      event: event && toEvent(event),
      attempt: Number(row.attempts) + 1,
    };
  });
}

/** Writes outcomes endpoint by endpoint, each endpoint's in the order given (see WebhookStore.finish). */
function finishAll(s: Statements, { owner, retryMs, outcomes }: FinishQuery): FinishResult {
  const results: FinishResult['outcomes'] = outcomes.map(() => 'lost');
  const byEndpoint = new Map<number, { outcome: AttemptOutcome; index: number }[]>();
  for (const [index, outcome] of outcomes.entries()) {
    // Only under the lease still held: one another relay took over is no longer this one's to end.
    if (!s.held.get(outcome.record.endpointId, outcome.position.seq, owner)) continue;
    const items = byEndpoint.get(outcome.record.endpointId) ?? [];
    items.push({ outcome, index });
    byEndpoint.set(outcome.record.endpointId, items);
  }
  const endpoints: RelayEndpoint[] = [];
  for (const [id, items] of byEndpoint) {
    const row = s.state.get(id);
    if (!row) continue;
    for (const { outcome } of items) recordOne(s, outcome, owner);
    const after = endpointAfterOutcomes(
      toEndpointState(row),
      items.map(({ outcome }) => outcome),
      retryMs,
    );
    const { failures, probeAt, lastSuccessAt, lastFailureAt, failingSince, disabledAt } = after.state;
    s.writeState.run(failures, probeAt, lastSuccessAt, lastFailureAt, failingSince, disabledAt, id);
    if (after.releasedAt !== undefined) s.release.run(after.releasedAt, id, after.releasedAt, after.releasedAt);
    s.pruneAttempts.run(id, id);
    for (const [i, { index }] of items.entries()) results[index] = after.disabled[i] ? 'disabled' : 'recorded';
    endpoints.push({ id, failures, probeAt, succeeded: lastSuccessAt !== null });
  }
  return { outcomes: results, endpoints };
}

/** One attempt's row, and its delivery removed (success, give-up) or due again. */
function recordOne(s: Statements, { record, position, ok, retryAt }: AttemptOutcome, owner: string) {
  const { endpointId: id } = record;
  s.insertAttempt.run(
    id,
    record.eventId,
    position.seq,
    record.attempt,
    record.at.getTime(),
    record.status,
    record.error,
    record.durationMs,
  );
  if (ok || retryAt === undefined) s.done.run(id, position.seq, owner);
  else s.retry.run(retryAt, id, position.seq, owner);
}

type StatsRow = { waiting: bigint | null; oldest: string | null; disabled: bigint };

/** /metrics' figures, on the counting connection: the count reads every event waiting (sqlite.ts, counting). */
function statsOn(counting: () => Database.Database, whileBusy: <T>(work: () => T) => T | Promise<T>) {
  let statement: Database.Statement<[], StatsRow> | undefined;
  const prepared = () =>
    (statement ??= counting().prepare<[], StatsRow>(
      `SELECT sum(CASE WHEN w.disabled_at IS NULL THEN ${WAITING} ELSE 0 END) AS waiting, ` +
        'min(CASE WHEN w.disabled_at IS NULL THEN min(' +
        "  coalesce((SELECT min(e.created_at) FROM webhook_deliveries d JOIN events e ON e.seq = d.seq WHERE d.endpoint_id = w.id), '~'), " +
        "  coalesce((SELECT e.created_at FROM events e WHERE e.seq > w.cursor_seq ORDER BY e.seq LIMIT 1), '~')) END) AS oldest, " +
        'count(w.disabled_at) AS disabled FROM webhook_endpoints w',
    ));
  return async () =>
    whileBusy(() => {
      const row = prepared().get()!;
      return {
        waiting: Number(row.waiting ?? 0),
        oldestWaitingAt: row.oldest === null || row.oldest === '~' ? null : new Date(row.oldest),
        disabled: Number(row.disabled),
      };
    });
}

/** Runs `work` in a write transaction of its own, retried while another process holds the lock. */
type Write = <T>(work: () => T) => T | Promise<T>;

type Int = bigint | number | null;
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
