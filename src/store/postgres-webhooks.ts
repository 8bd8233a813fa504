import type pg from 'pg';
import { HORIZON } from './postgres-event-clock.js';
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
    'UPDATE webhook_endpoints SET disabled_at = NULL, failing_since = NULL, cursor_tx = last.tx, cursor_seq = last.seq ' +
    'FROM last WHERE id = $1 AND disabled_at IS NOT NULL',
  exists: 'SELECT 1 FROM webhook_endpoints WHERE id = $1',
  lockEndpoint: 'SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE',
  roll: 'UPDATE webhook_endpoints SET previous_secret = secret, previous_until = $1, secret = $2 WHERE id = $3',
  attempts:
    'SELECT endpoint_id, event_id, attempt, at, status, error, duration_ms FROM webhook_attempts ' +
    'WHERE endpoint_id = $1 ORDER BY id DESC LIMIT $2',
  // One instance hands out an endpoint's events at a time; the others skip it.
  open:
    'SELECT w.id, w.cursor_tx::text AS cursor_tx, w.cursor_seq FROM webhook_endpoints w WHERE w.disabled_at IS NULL ' +
    'AND (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) < $1 FOR UPDATE SKIP LOCKED',
  // The feed's own rule (postgres.ts, listEvents): never past an event not yet visible.
  handOut:
    'WITH ev AS (SELECT tx, seq FROM events WHERE (tx, seq) > ($2::bigint, $3::bigint) ' +
    `AND tx < ${HORIZON} ORDER BY tx, seq LIMIT $4), ` +
    'ins AS (INSERT INTO webhook_deliveries (endpoint_id, tx, seq, attempts, next_at) ' +
    'SELECT $1, tx, seq, 0, $5 FROM ev ON CONFLICT DO NOTHING), ' +
    'last AS (SELECT tx, seq FROM ev ORDER BY tx DESC, seq DESC LIMIT 1) ' +
    'UPDATE webhook_endpoints SET cursor_tx = last.tx, cursor_seq = last.seq FROM last WHERE id = $1 ' +
    'RETURNING (SELECT count(*) FROM ev) AS copied',
  // Each enabled endpoint's earliest due deliveries (twice the slots: some may be taken by
  // another instance meanwhile), those due at the same instant in the feed's order (tx, seq), in
  // turns across endpoints, the one with the fewest attempts in flight first (sqlite-webhooks.ts,
  // inTurns); SKIP LOCKED: instances claiming at once take different deliveries, and the lease
  // then keeps the others off a claimed one until it expires.
  claim:
    'WITH busy AS (SELECT endpoint_id, count(*) AS n FROM webhook_deliveries ' +
    'WHERE lease_until IS NOT NULL AND lease_until > $1 GROUP BY endpoint_id), ' +
    'cand AS (SELECT x.endpoint_id, x.tx, x.seq, x.next_at, ' +
    'coalesce(b.n, 0) + row_number() OVER (PARTITION BY x.endpoint_id ORDER BY x.next_at, x.tx, x.seq) AS turn ' +
    'FROM webhook_endpoints w CROSS JOIN LATERAL (SELECT endpoint_id, tx, seq, next_at FROM webhook_deliveries ' +
    'WHERE endpoint_id = w.id AND next_at <= $1 AND (lease_until IS NULL OR lease_until <= $1) ' +
    'ORDER BY next_at, tx, seq LIMIT $2 * 2) x LEFT JOIN busy b ON b.endpoint_id = w.id WHERE w.disabled_at IS NULL), ' +
    'c AS (SELECT d.endpoint_id, d.tx, d.seq FROM webhook_deliveries d ' +
    'JOIN cand ON cand.endpoint_id = d.endpoint_id AND cand.tx = d.tx AND cand.seq = d.seq ' +
    'WHERE d.next_at <= $1 AND (d.lease_until IS NULL OR d.lease_until <= $1) ' +
    'ORDER BY cand.turn, cand.next_at LIMIT $2 FOR UPDATE OF d SKIP LOCKED), ' +
    'u AS (UPDATE webhook_deliveries d SET lease_until = $3, lease_owner = $4, attempts = d.attempts + 1 FROM c ' +
    'WHERE d.endpoint_id = c.endpoint_id AND d.tx = c.tx AND d.seq = c.seq RETURNING d.endpoint_id, d.tx, d.seq, d.attempts) ' +
    'SELECT u.endpoint_id, u.tx::text AS tx, u.seq, u.attempts, w.url, w.secret, w.previous_secret, w.previous_until, ' +
    'e.type, e.created_at, e.data FROM u JOIN webhook_endpoints w ON w.id = u.endpoint_id ' +
    'LEFT JOIN events e ON e.tx = u.tx AND e.seq = u.seq',
  // An endpoint's attempts of one batch, in the order given (the ids follow it). Not for an
  // endpoint removed while the attempts were in flight.
  insertAttempts:
    'INSERT INTO webhook_attempts (endpoint_id, event_id, attempt, at, status, error, duration_ms) ' +
    'SELECT w.id, a.event_id, a.attempt, a.at, a.status, a.error, a.duration_ms FROM webhook_endpoints w, ' +
    'unnest($2::text[], $3::int[], $4::bigint[], $5::int[], $6::text[], $7::int[]) WITH ORDINALITY ' +
    'AS a (event_id, attempt, at, status, error, duration_ms, n) WHERE w.id = $1 ORDER BY a.n',
  pruneAttempts:
    'DELETE FROM webhook_attempts WHERE endpoint_id = $1 AND id <= ' +
    `(SELECT id FROM webhook_attempts WHERE endpoint_id = $1 ORDER BY id DESC LIMIT 1 OFFSET ${ATTEMPTS_KEPT})`,
  done:
    'DELETE FROM webhook_deliveries d USING unnest($2::bigint[], $3::bigint[]) AS u (tx, seq) ' +
    'WHERE d.endpoint_id = $1 AND d.tx = u.tx AND d.seq = u.seq',
  retry:
    'UPDATE webhook_deliveries d SET next_at = u.next_at, lease_until = NULL, lease_owner = NULL ' +
    'FROM unnest($2::bigint[], $3::bigint[], $4::bigint[]) AS u (tx, seq, next_at) ' +
    'WHERE d.endpoint_id = $1 AND d.tx = u.tx AND d.seq = u.seq',
  release:
    'UPDATE webhook_deliveries SET lease_until = NULL, lease_owner = NULL ' +
    'WHERE endpoint_id = $1 AND tx = $2::bigint AND seq = $3 AND lease_owner = $4',
  succeeded: 'UPDATE webhook_endpoints SET last_success_at = $1, failing_since = NULL WHERE id = $2',
  failed:
    'UPDATE webhook_endpoints SET last_failure_at = $1, failing_since = coalesce(failing_since, $1) WHERE id = $2',
  disable:
    'UPDATE webhook_endpoints SET disabled_at = $1 WHERE id = $2 AND disabled_at IS NULL ' +
    'AND coalesce(last_success_at, -1) < $3 AND (failing_since <= $3 OR $4::boolean)',
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
 * its lease expires.
 */
export function postgresWebhooks(
  run: Run,
  inTransaction: <T>(work: (client: pg.PoolClient) => Promise<T>) => Promise<T>,
): WebhookStore {
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
      if (((await run(statements.enable, [id])).rowCount ?? 0) > 0) return 'enabled';
      return (await run(statements.exists, [id])).rows.length > 0 ? 'already' : 'unknown';
    },
    async rollSecret(id: number, secret: string, previousUntil: number) {
      return ((await run(statements.roll, [previousUntil, secret, id])).rowCount ?? 0) > 0;
    },
    async listAttempts(id: number, limit: number) {
      if ((await run(statements.exists, [id])).rows.length === 0) return undefined;
      return (await run<AttemptRow>(statements.attempts, [id, limit])).rows.map(toAttempt);
    },
    async handOut(now: number, batch: number, window: number) {
      return inTransaction(async (client) => {
        const { rows } = await run<{ id: bigint; cursor_tx: string; cursor_seq: bigint }>(
          statements.open,
          [window],
          client,
        );
        let copied = 0;
        for (const { id, cursor_tx, cursor_seq } of rows) {
          const result = await run<{ copied: bigint }>(
            statements.handOut,
            [id, cursor_tx, cursor_seq, batch, now],
            client,
          );
          copied += Number(result.rows[0]?.copied ?? 0);
        }
        return copied;
      });
    },
    async claim({ now, limit, leaseMs, owner }: ClaimQuery) {
      const { rows } = await run<ClaimRow>(statements.claim, [now, limit, now + leaseMs, owner]);
      return rows.map((row) => ({
        endpointId: Number(row.endpoint_id),
        url: row.url,
        secrets: secretsAt(now, row.secret, row.previous_secret, row.previous_until),
        position: { tx: BigInt(row.tx), seq: row.seq },
        event:
          row.data === null || row.data === undefined ? undefined : toEvent({ ...row, tx: BigInt(row.tx) } as EventRow),
        attempt: Number(row.attempts),
      }));
    },
    async finish(outcomes: AttemptOutcome[]) {
      // Each endpoint's row is locked before anything of its own, endpoints in ascending order,
      // by every instance: two batches written at once wait for each other, never deadlock. An
      // endpoint's outcomes are written in the order given, the order the attempts ended, as
      // SQLite writes them.
      const order = outcomes
        .map((outcome, index) => ({ outcome, index }))
        .sort((a, b) => a.outcome.record.endpointId - b.outcome.record.endpointId);
      const byEndpoint = new Map<number, typeof order>();
      for (const item of order) {
        const id = item.outcome.record.endpointId;
        const items = byEndpoint.get(id);
        if (items) items.push(item);
        else byEndpoint.set(id, [item]);
      }
      // A few statements per endpoint, whatever the number of its attempts: the rows of each kind
      // go in one statement, as arrays.
      return inTransaction(async (client) => {
        const disabled: boolean[] = new Array<boolean>(outcomes.length).fill(false);
        for (const [id, items] of byEndpoint) {
          await run(statements.lockEndpoint, [id], client);
          const records = items.map(({ outcome }) => outcome.record);
          await run(
            statements.insertAttempts,
            [
              id,
              records.map((r) => r.eventId),
              records.map((r) => r.attempt),
              records.map((r) => r.at.getTime()),
              records.map((r) => r.status),
              records.map((r) => r.error),
              records.map((r) => r.durationMs),
            ],
            client,
          );
          await run(statements.pruneAttempts, [id], client);
          const ended = items.filter(({ outcome }) => outcome.ok || outcome.retryAt === undefined);
          if (ended.length > 0) {
            const positions = ended.map(({ outcome }) => outcome.position);
            await run(statements.done, [id, positions.map((p) => String(p.tx)), positions.map((p) => p.seq)], client);
          }
          const retried = items.filter(({ outcome }) => !outcome.ok && outcome.retryAt !== undefined);
          if (retried.length > 0) {
            const positions = retried.map(({ outcome }) => outcome.position);
            await run(
              statements.retry,
              [
                id,
                positions.map((p) => String(p.tx)),
                positions.map((p) => p.seq),
                retried.map(({ outcome }) => outcome.retryAt),
              ],
              client,
            );
          }
          // The endpoint's state, outcome by outcome in the order given; of successes in a row,
          // only the last one's time is kept, so one statement writes them.
          for (const [i, { outcome, index }] of items.entries()) {
            const at = outcome.record.at.getTime();
            if (outcome.ok) {
              if (!items[i + 1]?.outcome.ok) await run(statements.succeeded, [at, id], client);
              continue;
            }
            await run(statements.failed, [at, id], client);
            const { rowCount } = await run(
              statements.disable,
              [at, id, outcome.disableUnlessSuccessSince, outcome.retryAt === undefined],
              client,
            );
            disabled[index] = (rowCount ?? 0) > 0;
          }
        }
        return disabled;
      });
    },
    async recover() {},
    async release(endpointId: number, position: EventPosition, owner: string) {
      await run(statements.release, [endpointId, String(position.tx), position.seq, owner]);
    },
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
