import { IDS_PER_MS } from '../events/ids.js';

// The event clock (migration 006, docs/events.md#ordering): an event's tx is its writing
// transaction's id plus event_clock.tx_offset, and the horizon is the oldest transaction still
// running on the same clock. The feed and the webhook relay list only events below the horizon,
// so no event can later appear before one already listed.
const OFFSET = '(SELECT tx_offset FROM event_clock)';

/** SQL for the current transaction's id on the event clock. */
export const EVENT_TX = `(pg_current_xact_id()::text::bigint + ${OFFSET})`;

/** SQL for the horizon: every event whose tx is below it is committed, and none will join them. */
export const HORIZON = `(pg_snapshot_xmin(pg_current_snapshot())::text::bigint + ${OFFSET})`;

/**
 * The statements, run in one transaction as the service starts (migrate), that move the event
 * clock to the present (docs/events.md#ids): every event written afterwards has a tx above the
 * server clock's floor (ids.ts, clockFloorAt) and above every stored event's. So a database
 * restored from an older dump, into this server or another, gives out no id the database it
 * replaces gave out, even when that one is gone, and new events follow the restored ones.
 *
 * The offset only grows. The lock waits for every transaction that is writing an event and
 * keeps new ones waiting until the commit: none then straddles the change, so an event written
 * with the old offset never appears after one written with the new (which a reader would have
 * passed). Every transaction that writes an event afterwards has an id at least the oldest
 * running one's (the snapshot's xmin), so its tx is at least the target.
 */
export const ADVANCE_EVENT_CLOCK = [
  'LOCK TABLE events IN EXCLUSIVE MODE',
  'UPDATE event_clock SET tx_offset = greatest(tx_offset, c.target - c.xmin) FROM (SELECT greatest(' +
    '(SELECT coalesce(max(tx), 0) + 1 FROM events), ' +
    `(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + 1) * ${IDS_PER_MS}) AS target, ` +
    'pg_snapshot_xmin(pg_current_snapshot())::text::bigint AS xmin) AS c',
] as const;
