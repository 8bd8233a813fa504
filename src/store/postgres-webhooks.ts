import type pg from 'pg';
import { HORIZON } from './postgres-event-clock.js';
import { EVENTS_CHANNEL, listenForEvents } from './postgres-listen.js';
import { toEvent, type EventRow } from './rows.js';
import type { EventPosition } from './store.js';
import { INT64_MAX } from '../schemas.js';
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
  type ClaimQuery,
  type EndpointRow,
  type EndpointState,
  type EndpointStateRow,
  type FinishQuery,
  type FinishResult,
  type NewWebhookEndpoint,
  type ReplayFrom,
  type ReplayOutcome,
  type ResendOutcome,
  type ResendRefusal,
  type SigningTarget,
  type WebhookStore,
  type WebhookTools,
} from './webhooks.js';

export type Run = <R extends pg.QueryResultRow>(
  text: string,
  values: unknown[],
  client?: pg.PoolClient,
) => Promise<pg.QueryResult<R>>;

// The last event the feed can list (postgres.ts, listEvents): every event after it, committed
// now or later, sorts after it, so a new (or re-enabled) endpoint misses none created from now on.
const LAST_LISTED =
  `top AS (SELECT tx, seq FROM events WHERE tx < ${HORIZON} ORDER BY tx DESC, seq DESC LIMIT 1), ` +
  'last AS (SELECT coalesce((SELECT tx FROM top), 0::bigint) AS tx, coalesce((SELECT seq FROM top), 0::bigint) AS seq)';
// A disabled endpoint is owed no event created while it is disabled (enable moves its cursor).
const WAITING =
  '(SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) + ' +
  '(CASE WHEN w.disabled_at IS NULL THEN ' +
  '(SELECT count(*) FROM events e WHERE (e.tx, e.seq) > (w.cursor_tx, w.cursor_seq)) ELSE 0 END)';
const ENDPOINT_COLUMNS =
  'w.id, w.url, w.description, w.created_at, w.disabled_at, w.last_success_at, w.last_failure_at, w.previous_until';

// The relay's own bookkeeping (hand-outs, leases, outcomes) commits without waiting for the WAL
// to reach the disk (synchronous_commit = off, for its transaction alone): a crash of the
// database server can forget only its last fraction of a second, which then makes an attempt
// again, so at least once still holds; the API's commits still wait for the disk
// (docs/webhooks.md#the-relay). Set in the statement that starts each of its transactions.
const ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true)";
// The endpoints a claim wants deliveries for, with how many and whether it is a probe.
const WANTS = `want AS (SELECT u.*, ${ASYNC_COMMIT} FROM unnest($1::bigint[], $2::int[], $3::boolean[]) AS u (id, n, probe))`;
// Not leased, or leased by a relay whose lease has expired.
const FREE = '(d.lease_until IS NULL OR d.lease_until <= $4)';

const statements = {
  insert:
    `WITH ${LAST_LISTED} ` +
    'INSERT INTO webhook_endpoints (url, description, secret, created_at, cursor_tx, cursor_seq) ' +
    'SELECT $1, $2, $3, $4, last.tx, last.seq FROM last RETURNING id',
  get: `SELECT ${ENDPOINT_COLUMNS}, ${WAITING} AS waiting FROM webhook_endpoints w WHERE w.id = $1`,
  list: `SELECT ${ENDPOINT_COLUMNS}, ${WAITING} AS waiting FROM webhook_endpoints w ORDER BY w.id`,
  remove:
    'WITH d AS (DELETE FROM webhook_deliveries WHERE endpoint_id = $1), ' +
    'a AS (DELETE FROM webhook_attempts WHERE endpoint_id = $1) DELETE FROM webhook_endpoints WHERE id = $1',
  enable:
    `WITH ${LAST_LISTED} ` +
    'UPDATE webhook_endpoints SET disabled_at = NULL, failing_since = NULL, failures = 0, probe_at = NULL, ' +
    'cursor_tx = last.tx, cursor_seq = last.seq FROM last WHERE id = $1 AND disabled_at IS NOT NULL',
  exists: 'SELECT 1 FROM webhook_endpoints WHERE id = $1',
  roll: 'UPDATE webhook_endpoints SET previous_secret = secret, previous_until = $1, secret = $2 WHERE id = $3',
  attempts:
    'SELECT endpoint_id, event_id, attempt, at, status, error, duration_ms FROM webhook_attempts ' +
    'WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2',
  relayEndpoints:
    'SELECT id, failures, probe_at, last_success_at IS NOT NULL AS succeeded FROM webhook_endpoints ' +
    'WHERE disabled_at IS NULL',
  // The events after its cursor, for each endpoint wanted that has fewer deliveries due than
  // wanted, up to the feed's own rule (postgres.ts, listEvents): never past an event not yet
  // visible. The endpoint's row is locked first (ascending ids, as finish locks them): instances
  // handing out to one endpoint take turns, the second reading the cursor the first moved.
  handOut:
    `WITH ${WANTS}, ` +
    'ep AS (SELECT w.id, w.cursor_tx, w.cursor_seq, want.n FROM webhook_endpoints w JOIN want ON want.id = w.id ' +
    'WHERE w.disabled_at IS NULL ' +
    `AND EXISTS (SELECT 1 FROM events e WHERE (e.tx, e.seq) > (w.cursor_tx, w.cursor_seq) AND e.tx < ${HORIZON}) ` +
    'AND (SELECT count(*) FROM (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = w.id ' +
    `AND (want.probe OR d.next_at <= $4) AND ${FREE} LIMIT want.n) x) < want.n ` +
    'ORDER BY w.id FOR UPDATE OF w), ' +
    'ev AS (SELECT ep.id, e.tx, e.seq FROM ep CROSS JOIN LATERAL (SELECT tx, seq FROM events ' +
    `WHERE (tx, seq) > (ep.cursor_tx, ep.cursor_seq) AND tx < ${HORIZON} ORDER BY tx, seq ` +
    'LIMIT greatest($5::int, ep.n)) e), ' +
    'ins AS (INSERT INTO webhook_deliveries (endpoint_id, tx, seq, attempts, next_at) ' +
    'SELECT id, tx, seq, 0, $4 FROM ev ON CONFLICT DO NOTHING), ' +
    'last AS (SELECT DISTINCT ON (id) id, tx, seq FROM ev ORDER BY id, tx DESC, seq DESC) ' +
    'UPDATE webhook_endpoints w SET cursor_tx = last.tx, cursor_seq = last.seq FROM last WHERE w.id = last.id',
  // Per endpoint wanted, its earliest due deliveries, those due at the same instant in the
  // feed's order (tx, seq: the due index's order); for a probe, its oldest delivery waiting, in
  // the feed's order, and only when its probe_at has passed, which moves to the lease's end.
  // SKIP LOCKED: instances claiming at once take different deliveries (and one probes an
  // endpoint), and the lease then keeps the others off a claimed one until it expires.
  claim:
    `WITH ${WANTS}, ` +
    'probe AS (SELECT w.id FROM webhook_endpoints w JOIN want ON want.id = w.id AND want.probe ' +
    'WHERE w.disabled_at IS NULL AND (w.probe_at IS NULL OR w.probe_at <= $4) ' +
    'ORDER BY w.id FOR UPDATE OF w SKIP LOCKED), ' +
    'c AS (SELECT x.endpoint_id, x.tx, x.seq FROM want JOIN webhook_endpoints w ON w.id = want.id ' +
    'AND w.disabled_at IS NULL AND NOT want.probe CROSS JOIN LATERAL (SELECT endpoint_id, tx, seq ' +
    `FROM webhook_deliveries d WHERE d.endpoint_id = want.id AND d.next_at <= $4 AND ${FREE} ` +
    'ORDER BY d.next_at, d.tx, d.seq LIMIT want.n FOR UPDATE OF d SKIP LOCKED) x ' +
    'UNION ALL SELECT x.endpoint_id, x.tx, x.seq FROM probe CROSS JOIN LATERAL (SELECT endpoint_id, tx, seq ' +
    `FROM webhook_deliveries d WHERE d.endpoint_id = probe.id AND ${FREE} ` +
    'ORDER BY d.tx, d.seq LIMIT 1 FOR UPDATE OF d SKIP LOCKED) x), ' +
    'took AS (UPDATE webhook_endpoints w SET probe_at = $5 FROM probe WHERE w.id = probe.id ' +
    'AND EXISTS (SELECT 1 FROM c WHERE c.endpoint_id = w.id)), ' +
    'u AS (UPDATE webhook_deliveries d SET lease_until = $5, lease_owner = $6, attempts = d.attempts + 1 FROM c ' +
    'WHERE d.endpoint_id = c.endpoint_id AND d.tx = c.tx AND d.seq = c.seq RETURNING d.endpoint_id, d.tx, d.seq, d.attempts) ' +
    'SELECT u.endpoint_id, u.tx::text AS tx, u.seq, u.attempts, w.url, w.secret, w.previous_secret, w.previous_until, ' +
    'e.type, e.created_at, e.data FROM u JOIN webhook_endpoints w ON w.id = u.endpoint_id ' +
    'LEFT JOIN events e ON e.tx = u.tx AND e.seq = u.seq',
  // The endpoints of a batch of outcomes, as they are now, and which of the outcomes ($2..$4:
  // endpoint, tx, seq) are of deliveries still leased by $5, those locked.
  readOutcomes:
    `WITH ep AS (SELECT id, failures, probe_at, last_success_at, last_failure_at, failing_since, disabled_at, ` +
    `${ASYNC_COMMIT} AS async FROM webhook_endpoints WHERE id = ANY($1::bigint[])), ` +
    'held AS (SELECT o.n FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS o (endpoint_id, tx, seq, n) ' +
    'JOIN webhook_deliveries d ON d.endpoint_id = o.endpoint_id AND d.tx = o.tx AND d.seq = o.seq ' +
    'AND d.lease_owner = $5 FOR UPDATE OF d) ' +
    'SELECT id, failures, probe_at, last_success_at, last_failure_at, failing_since, disabled_at, NULL::bigint AS n FROM ep ' +
    'UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, n FROM held',
  // The rows of endpoints whose state the outcomes change, locked in ascending order by every
  // instance: two batches written at once wait for each other, never deadlock.
  lockStates:
    'SELECT id, failures, probe_at, last_success_at, last_failure_at, failing_since, disabled_at ' +
    'FROM webhook_endpoints WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE',
  // The outcomes held, in the order given (the attempts' ids follow it): each attempt's row,
  // each delivery removed (no retry time) or due again; then each endpoint's state after them
  // (a release time: every delivery waiting for it due then) and its attempts beyond the last
  // ATTEMPTS_KEPT deleted, except those of events still waiting for it.
  writeOutcomes:
    'WITH o AS (SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::int[], $6::bigint[], ' +
    '$7::int[], $8::text[], $9::int[], $10::bigint[]) WITH ORDINALITY ' +
    'AS o (endpoint_id, event_id, tx, seq, attempt, at, status, error, duration_ms, retry_at, n)), ' +
    'ins AS (INSERT INTO webhook_attempts (endpoint_id, event_id, tx, seq, attempt, at, status, error, duration_ms) ' +
    'SELECT endpoint_id, event_id, tx, seq, attempt, at, status, error, duration_ms FROM o ORDER BY n), ' +
    'done AS (DELETE FROM webhook_deliveries d USING o ' +
    'WHERE d.endpoint_id = o.endpoint_id AND d.tx = o.tx AND d.seq = o.seq AND o.retry_at IS NULL AND d.lease_owner = $11), ' +
    'again AS (UPDATE webhook_deliveries d SET next_at = o.retry_at, lease_until = NULL, lease_owner = NULL FROM o ' +
    'WHERE d.endpoint_id = o.endpoint_id AND d.tx = o.tx AND d.seq = o.seq AND o.retry_at IS NOT NULL AND d.lease_owner = $11), ' +
    'st AS (SELECT * FROM unnest($12::bigint[], $13::int[], $14::bigint[], $15::bigint[], $16::bigint[], $17::bigint[], ' +
    '$18::bigint[], $19::bigint[]) AS st (id, failures, probe_at, last_success_at, last_failure_at, failing_since, ' +
    'disabled_at, released_at)), ' +
    'r AS (UPDATE webhook_deliveries d SET next_at = st.released_at FROM st WHERE st.released_at IS NOT NULL ' +
    'AND d.endpoint_id = st.id AND d.next_at <> st.released_at AND (d.lease_until IS NULL OR d.lease_until <= st.released_at)), ' +
    // What the prune reads is the database as the statement began: without this batch's attempts
    // (so it keeps that many fewer of the others), with this batch's deliveries done.
    // Each endpoint's cut, worked out once (MATERIALIZED), then a range of its index deleted.
    'cut AS MATERIALIZED (SELECT e.id, (SELECT x.id FROM webhook_attempts x WHERE x.endpoint_id = e.id ' +
    `ORDER BY x.id DESC LIMIT 1 OFFSET greatest(0, ${ATTEMPTS_KEPT} - (SELECT count(*) FROM o WHERE o.endpoint_id = e.id))) ` +
    'AS last FROM (SELECT DISTINCT endpoint_id AS id FROM o) e), ' +
    'p AS (DELETE FROM webhook_attempts a USING cut WHERE a.endpoint_id = cut.id AND a.id <= cut.last ' +
    'AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = a.endpoint_id AND d.tx = a.tx AND d.seq = a.seq)) ' +
    'UPDATE webhook_endpoints w SET failures = st.failures, probe_at = st.probe_at, last_success_at = st.last_success_at, ' +
    'last_failure_at = st.last_failure_at, failing_since = st.failing_since, disabled_at = st.disabled_at FROM st WHERE w.id = st.id',
  stats:
    `SELECT sum(CASE WHEN w.disabled_at IS NULL THEN ${WAITING} ELSE 0 END) AS waiting, ` +
    'min(CASE WHEN w.disabled_at IS NULL THEN least(' +
    '(SELECT min(e.created_at) FROM webhook_deliveries d JOIN events e ON e.tx = d.tx AND e.seq = d.seq WHERE d.endpoint_id = w.id), ' +
    '(SELECT e.created_at FROM events e WHERE (e.tx, e.seq) > (w.cursor_tx, w.cursor_seq) ORDER BY e.tx, e.seq LIMIT 1)) END) AS oldest, ' +
    'count(w.disabled_at) AS disabled FROM webhook_endpoints w',
} as const;

interface ClaimRow extends Partial<Omit<EventRow, 'tx'>> {
  endpoint_id: bigint;
  tx: string;
  seq: bigint;
  attempts: number;
  url: string;
  secret: string;
  previous_secret: string | null;
  previous_until: bigint | null;
}

/**
 * The webhook half of the PostgreSQL store, shared by every instance: endpoints' events are
 * handed out under a row lock, deliveries claimed with FOR UPDATE SKIP LOCKED and a lease, so
 * each attempt is made by one instance and one a killed instance abandoned is taken over once
 * its lease expires; an outcome is written only by the instance still holding its lease.
 * `connection` is the settings of the connection each relay listens for commits on.
 */
export function postgresWebhooks(
  inTransaction: <T>(work: (client: pg.PoolClient) => Promise<T>) => Promise<T>,
  connection: pg.ClientConfig,
  run: Run,
): WebhookStore {
  return {
    ...endpointCommands(run),
    ...postgresWebhookTools(run, inTransaction),
    async relayEndpoints() {
      const { rows } = await run<{ id: bigint; failures: number; probe_at: bigint | null; succeeded: boolean }>(
        statements.relayEndpoints,
        [],
      );
      return rows.map((row) => ({
        id: Number(row.id),
        failures: Number(row.failures),
        probeAt: row.probe_at === null ? null : Number(row.probe_at),
        succeeded: row.succeeded,
      }));
    },
    claim: (query) => claim(run, query),
    finish: (query) => inTransaction((client) => finishAll(run, client, query)),
    async recover() {},
    onEventsWritten: eventsHeard(connection),
    async stats() {
      const { rows } = await run<{ waiting: bigint | null; oldest: Date | null; disabled: bigint }>(
        statements.stats,
        [],
      );
      const row = rows[0]!;
      return { waiting: Number(row.waiting ?? 0), oldestWaitingAt: row.oldest, disabled: Number(row.disabled) };
    },
  };
}

/** What `petstore webhooks` does to endpoints. */
function endpointCommands(run: Run) {
  const get = async (id: number | bigint) => (await run<EndpointRow>(statements.get, [id])).rows[0];
  return {
    async addEndpoint({ url, description, secret, createdAt }: NewWebhookEndpoint) {
      const { rows } = await run<{ id: bigint }>(statements.insert, [url, description, secret, createdAt]);
      return toEndpoint((await get(rows[0]!.id))!);
    },
    async listEndpoints() {
      return (await run<EndpointRow>(statements.list, [])).rows.map(toEndpoint);
    },
    async removeEndpoint(id: number) {
      return ((await run(statements.remove, [id])).rowCount ?? 0) > 0;
    },
    async enableEndpoint(id: number) {
      if (((await run(statements.enable, [id])).rowCount ?? 0) > 0) return 'enabled' as const;
      return (await run(statements.exists, [id])).rows.length > 0 ? ('already' as const) : ('unknown' as const);
    },
    async rollSecret(id: number, secret: string, previousUntil: number) {
      return ((await run(statements.roll, [previousUntil, secret, id])).rowCount ?? 0) > 0;
    },
    async listAttempts(id: number, limit: number) {
      if ((await run(statements.exists, [id])).rows.length === 0) return undefined;
      return (await run<AttemptRow>(statements.attempts, [id, limit])).rows.map(toAttempt);
    },
  };
}

/** See WebhookStore.claim: the hand-out, then the leases, each one statement for every endpoint wanted. */
async function claim(run: Run, { now, leaseMs, owner, wants, batch }: ClaimQuery) {
  const wanted = wants.filter((want) => want.count > 0);
  if (wanted.length === 0) return [];
  const values = [wanted.map((w) => w.endpointId), wanted.map((w) => w.count), wanted.map((w) => w.probe), now];
  await run(statements.handOut, [...values, batch]);
  const { rows } = await run<ClaimRow>(statements.claim, [...values, now + leaseMs, owner]);
  return rows.map((row) => ({
    endpointId: Number(row.endpoint_id),
    url: row.url,
    secrets: secretsAt(now, row.secret, row.previous_secret, row.previous_until),
    position: { tx: BigInt(row.tx), seq: row.seq },
    event:
      row.data === null || row.data === undefined ? undefined : toEvent({ ...row, tx: BigInt(row.tx) } as EventRow),
    attempt: Number(row.attempts),
  }));
}

// An endpoint's last success is written again only once it is this much older than a new one:
// a receiver answering every attempt is not one row written per batch, on each instance, under
// a lock the others wait for. `webhooks list` shows it a second late at most.
const SUCCESS_RESOLUTION_MS = 1000;

/** Whether outcomes leave `before` as it is, but for a last success less than SUCCESS_RESOLUTION_MS newer. */
function settled(before: EndpointState, after: EndpointState, releasedAt: number | undefined): boolean {
  const success =
    after.lastSuccessAt === before.lastSuccessAt ||
    (before.lastSuccessAt !== null && after.lastSuccessAt! - before.lastSuccessAt < SUCCESS_RESOLUTION_MS);
  return (
    success &&
    releasedAt === undefined &&
    after.failures === before.failures &&
    after.probeAt === before.probeAt &&
    after.lastFailureAt === before.lastFailureAt &&
    after.failingSince === before.failingSince &&
    after.disabledAt === before.disabledAt
  );
}

type StateRow = EndpointStateRow & { id: bigint | null };
type Held = { outcome: AttemptOutcome; index: number }[];

/** An endpoint's outcomes of a batch, held under the lease, with its state after them. */
interface After extends ReturnType<typeof endpointAfterOutcomes> {
  id: number;
  items: Held;
}

/**
 * See WebhookStore.finish, in two statements however many endpoints and attempts (three when an
 * endpoint's state changes): the deliveries still leased locked, and each endpoint read; the
 * rows of the endpoints whose state the outcomes change locked (ascending), and their outcomes
 * worked out again from them; then everything written, as arrays.
 */
async function finishAll(run: Run, client: pg.PoolClient, query: FinishQuery): Promise<FinishResult> {
  const { rows, byEndpoint } = await readHeld(run, client, query);
  const afterOf = (row: StateRow): After => {
    const items = byEndpoint.get(Number(row.id))!;
    const outcomes = items.map(({ outcome }) => outcome);
    return { id: Number(row.id), items, ...endpointAfterOutcomes(toEndpointState(row), outcomes, query.retryMs) };
  };
  const read = rows.filter((row) => row.id !== null && byEndpoint.has(Number(row.id)));
  const changed = read.filter((row) => {
    const { state, releasedAt } = afterOf(row);
    return !settled(toEndpointState(row), state, releasedAt);
  });
  // Worked out again from the locked rows: what was read may have changed meanwhile.
  const locked = changed.length
    ? (await run<StateRow>(statements.lockStates, [changed.map((row) => Number(row.id))], client)).rows.map(afterOf)
    : [];
  const afters = [...read.filter((row) => !changed.includes(row)).map(afterOf), ...locked];
  const results: FinishResult['outcomes'] = query.outcomes.map(() => 'lost');
  for (const { items, disabled } of afters) {
    for (const [i, { index }] of items.entries()) results[index] = disabled[i] ? 'disabled' : 'recorded';
  }
  if (afters.length > 0) await writeAll(run, client, query.owner, afters, locked);
  const endpoints = afters.map(({ id, state }) => ({
    id,
    failures: state.failures,
    probeAt: state.probeAt,
    succeeded: state.lastSuccessAt !== null,
  }));
  return { outcomes: results, endpoints };
}

/** The endpoints' rows as they are, and the outcomes whose deliveries are still `owner`'s (locked), by endpoint. */
async function readHeld(run: Run, client: pg.PoolClient, { owner, outcomes }: FinishQuery) {
  const ids = [...new Set(outcomes.map((o) => o.record.endpointId))].sort((a, b) => a - b);
  const { rows } = await run<StateRow & { n: bigint | null }>(
    statements.readOutcomes,
    [
      ids,
      outcomes.map((o) => o.record.endpointId),
      outcomes.map((o) => String(o.position.tx)),
      outcomes.map((o) => o.position.seq),
      owner,
    ],
    client,
  );
  const held = new Set(rows.filter((row) => row.n !== null).map((row) => Number(row.n) - 1));
  const byEndpoint = new Map<number, Held>();
  for (const [index, outcome] of outcomes.entries()) {
    if (!held.has(index)) continue;
    const items = byEndpoint.get(outcome.record.endpointId) ?? [];
    items.push({ outcome, index });
    byEndpoint.set(outcome.record.endpointId, items);
  }
  return { rows: rows.filter((row) => row.n === null), byEndpoint };
}

/** The outcomes of `afters` (endpoints still there), and the state of those `locked`, in one statement. */
async function writeAll(run: Run, client: pg.PoolClient, owner: string, afters: After[], locked: After[]) {
  const written = afters.flatMap(({ items }) => items.map(({ outcome }) => outcome));
  const records = written.map((o) => o.record);
  const states = locked.map(({ state }) => state);
  await run(
    statements.writeOutcomes,
    [
      records.map((r) => r.endpointId),
      records.map((r) => r.eventId),
      written.map((o) => String(o.position.tx)),
      written.map((o) => o.position.seq),
      records.map((r) => r.attempt),
      records.map((r) => r.at.getTime()),
      records.map((r) => r.status),
      records.map((r) => r.error),
      records.map((r) => r.durationMs),
      written.map((o) => (o.ok || o.retryAt === undefined ? null : o.retryAt)),
      owner,
      locked.map(({ id }) => id),
      states.map((state) => state.failures),
      states.map((state) => state.probeAt),
      states.map((state) => state.lastSuccessAt),
      states.map((state) => state.lastFailureAt),
      states.map((state) => state.failingSince),
      states.map((state) => state.disabledAt),
      locked.map(({ releasedAt }) => releasedAt ?? null),
    ],
    client,
  );
}

/** onEventsWritten: one listening connection, while any listener is there. */
function eventsHeard(connection: pg.ClientConfig) {
  const listeners = new Set<() => void>();
  let stop: (() => Promise<void>) | undefined;
  return (listener: () => void) => {
    listeners.add(listener);
    stop ??= listenForEvents(connection, () => listeners.forEach((each) => each()));
    return async () => {
      listeners.delete(listener);
      if (listeners.size > 0 || !stop) return;
      const stopping = stop;
      stop = undefined;
      await stopping();
    };
  };
}

// The operators' tools' statements (docs/webhooks.md#sending-again). Positions go as text: a
// bigint parameter is sent as its decimal digits either way.
const tools = {
  // Every instance's relay hears it at the commit, as it hears new events (migration 009's trigger).
  wake: `SELECT pg_notify('${EVENTS_CHANNEL}', current_schema())`,
  target: 'SELECT url, secret, previous_secret, previous_until, disabled_at FROM webhook_endpoints WHERE id = $1',
  // FOR UPDATE: a resend waits for a relay writing the endpoint's outcomes, and then sees them.
  lockEndpoint:
    'SELECT cursor_tx::text AS cursor_tx, cursor_seq, disabled_at FROM webhook_endpoints WHERE id = $1 FOR UPDATE',
  endpoint: 'SELECT cursor_tx::text AS cursor_tx, cursor_seq, disabled_at FROM webhook_endpoints WHERE id = $1',
  // Kept, or deleted (before the oldest kept: retention deletes oldest first), or never written.
  event:
    'SELECT EXISTS (SELECT 1 FROM events WHERE tx = $1::bigint AND seq = $2::bigint) AS kept, ' +
    'coalesce(($1::bigint, $2::bigint) < (SELECT tx, seq FROM events ORDER BY tx, seq LIMIT 1), false) AS deleted',
  delivery:
    'SELECT lease_until FROM webhook_deliveries WHERE endpoint_id = $1 AND tx = $2::bigint AND seq = $3::bigint FOR UPDATE',
  insertDelivery:
    'INSERT INTO webhook_deliveries (endpoint_id, tx, seq, attempts, next_at) VALUES ($1, $2::bigint, $3::bigint, 0, $4)',
  dueNow: 'UPDATE webhook_deliveries SET next_at = $4 WHERE endpoint_id = $1 AND tx = $2::bigint AND seq = $3::bigint',
  // A replay's batch: the next REPLAY_BATCH events after ($2, $3) up to the endpoint's cursor ($4,
  // $5), created at or after $6 (any time when null), made due at $8 in one statement; not for an
  // endpoint disabled or removed meanwhile.
  replayBatch:
    'WITH ev AS (SELECT tx, seq FROM events WHERE (tx, seq) > ($2::bigint, $3::bigint) ' +
    'AND (tx, seq) <= ($4::bigint, $5::bigint) AND ($6::timestamptz IS NULL OR created_at >= $6) ' +
    'ORDER BY tx, seq LIMIT $7), ' +
    'ins AS (INSERT INTO webhook_deliveries (endpoint_id, tx, seq, attempts, next_at) ' +
    'SELECT w.id, ev.tx, ev.seq, 0, $8 FROM ev, webhook_endpoints w WHERE w.id = $1 AND w.disabled_at IS NULL ' +
    'ON CONFLICT DO NOTHING RETURNING 1), ' +
    'last AS (SELECT tx, seq FROM ev ORDER BY tx DESC, seq DESC LIMIT 1) ' +
    'SELECT (SELECT count(*) FROM ev) AS events, (SELECT count(*) FROM ins) AS due, ' +
    '(SELECT tx::text FROM last) AS last_tx, (SELECT seq FROM last) AS last_seq',
  later:
    'SELECT count(*) AS n FROM events WHERE (tx, seq) > ($1::bigint, $2::bigint) ' +
    'AND ($3::timestamptz IS NULL OR created_at >= $3)',
} as const;

type EndpointCursorRow = { cursor_tx: string; cursor_seq: bigint; disabled_at: bigint | null };

/** The endpoint's cursor, or why nothing may be sent to it again (none has this id, or it is disabled). */
function cursorOf(row: EndpointCursorRow | undefined): { cursor: EventPosition } | ResendRefusal {
  if (!row) return { kind: 'unknown_endpoint' };
  if (row.disabled_at !== null) return { kind: 'disabled' };
  return { cursor: { tx: BigInt(row.cursor_tx), seq: row.cursor_seq } };
}

/** Undefined when the event at `position` is kept; else whether it was deleted or never was. */
async function missingEvent(run: Run, position: EventPosition, client?: pg.PoolClient) {
  // Past int64: no event ever had it.
  if (position.tx > INT64_MAX) return { kind: 'unknown_event' } as const;
  const { rows } = await run<{ kept: boolean; deleted: boolean }>(
    tools.event,
    [String(position.tx), String(position.seq)],
    client,
  );
  if (rows[0]!.kept) return undefined;
  return { kind: rows[0]!.deleted ? 'expired_event' : 'unknown_event' } as const;
}

/**
 * `webhooks test`, `resend` and `replay` on PostgreSQL (docs/webhooks.md#sending-again): a
 * command runs them, on any instance's database; the instances' relays send what they made due.
 */
export function postgresWebhookTools(
  run: Run,
  inTransaction: <T>(work: (client: pg.PoolClient) => Promise<T>) => Promise<T>,
): WebhookTools {
  return {
    signingTarget: (id, now) => postgresSigningTarget(run, id, now),
    resend: (endpointId, position, now) =>
      inTransaction((client) => postgresResend(run, client, endpointId, position, now)),
    replay: (endpointId, from, now) => postgresReplay(run, endpointId, from, now),
  };
}

async function postgresSigningTarget(run: Run, id: number, now: number): Promise<SigningTarget | undefined> {
  const { rows } = await run<{
    url: string;
    secret: string;
    previous_secret: string | null;
    previous_until: bigint | null;
    disabled_at: bigint | null;
  }>(tools.target, [id]);
  const row = rows[0];
  if (!row) return undefined;
  const secrets = secretsAt(now, row.secret, row.previous_secret, row.previous_until);
  return { url: row.url, secrets, disabled: row.disabled_at !== null };
}

async function postgresResend(
  run: Run,
  client: pg.PoolClient,
  endpointId: number,
  position: EventPosition,
  now: number,
): Promise<ResendOutcome> {
  const endpoint = cursorOf((await run<EndpointCursorRow>(tools.lockEndpoint, [endpointId], client)).rows[0]);
  if ('kind' in endpoint) return endpoint;
  const missing = await missingEvent(run, position, client);
  if (missing) return missing;
  const key = [endpointId, String(position.tx), String(position.seq)];
  const { rows } = await run<{ lease_until: bigint | null }>(tools.delivery, key, client);
  if (rows[0]?.lease_until != null && Number(rows[0].lease_until) > now) return { kind: 'due', before: 'in_flight' };
  await run(rows[0] ? tools.dueNow : tools.insertDelivery, [...key, now], client);
  await run(tools.wake, [], client);
  return { kind: 'due', before: rows[0] ? 'waiting' : 'none' };
}

async function postgresReplay(run: Run, endpointId: number, from: ReplayFrom, now: number): Promise<ReplayOutcome> {
  const endpoint = cursorOf((await run<EndpointCursorRow>(tools.endpoint, [endpointId])).rows[0]);
  if ('kind' in endpoint) return endpoint;
  const missing = 'after' in from ? await missingEvent(run, from.after) : undefined;
  if (missing) return missing;
  const start = 'after' in from ? from.after : { tx: 0n, seq: 0n };
  const since = 'since' in from ? from.since : null;
  const { cursor } = endpoint;
  const { events, due } = await replayInBatches(start, async (after) => {
    const { rows } = await run<{ events: bigint; due: bigint; last_tx: string | null; last_seq: bigint | null }>(
      tools.replayBatch,
      [
        endpointId,
        String(after.tx),
        String(after.seq),
        String(cursor.tx),
        String(cursor.seq),
        since,
        REPLAY_BATCH,
        now,
      ],
    );
    const row = rows[0]!;
    const last = row.last_tx === null ? undefined : { tx: BigInt(row.last_tx), seq: row.last_seq! };
    return { events: Number(row.events), due: Number(row.due), last };
  });
  if (due > 0) await run(tools.wake, []);
  // Those after the cursor: the relay hands them out as it does every new event.
  const beyond = laterOf(start, cursor);
  const { rows } = await run<{ n: bigint }>(tools.later, [String(beyond.tx), String(beyond.seq), since]);
  return { kind: 'replayed', due, waiting: events - due + Number(rows[0]!.n) };
}
