// The outbox's records, apart from store.ts: the webhook store (webhooks.ts), which store.ts
// holds, names them too.

/**
 * Where an event stands in the feed's order: the id of the transaction that wrote it (PostgreSQL;
 * always 0 on SQLite, whose writers take turns), then its sequence number.
 */
export interface EventPosition {
  tx: bigint;
  seq: bigint;
}

/** A row of the outbox: one event, written in the transaction that stored what it announces. */
export interface EventRecord {
  position: EventPosition;
  type: 'pet.created';
  createdAt: Date;
  /** The announced object as JSON text, exactly as the API answered it (every int64 digit kept). */
  data: string;
}

export interface EventQuery {
  /** Only events after this position; from the oldest kept without it. */
  after?: EventPosition;
  limit: number;
}
