// The event clock (migration 006, docs/events.md#ordering): an event's tx is its writing
// transaction's id plus event_clock.tx_offset, and the horizon is the oldest transaction still
// running on the same clock. The feed and the webhook relay list only events below the horizon,
// so no event can later appear before one already listed.
const OFFSET = '(SELECT tx_offset FROM event_clock)';

/** SQL for the current transaction's id on the event clock. */
export const EVENT_TX = `(pg_current_xact_id()::text::bigint + ${OFFSET})`;

/** SQL for the horizon: every event whose tx is below it is committed, and none will join them. */
export const HORIZON = `(pg_snapshot_xmin(pg_current_snapshot())::text::bigint + ${OFFSET})`;
