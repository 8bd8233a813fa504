import { INT64_MAX } from '../schemas.js';
import type { EventPosition } from '../store/store.js';

const PREFIX = 'evt_';
const SHAPE = /^evt_([0-9a-f]{16})([0-9a-f]{16})$/;
const hex16 = (value: bigint) => value.toString(16).padStart(16, '0');

/**
 * An event's id: `evt_`, then its position in the feed as 32 hexadecimal digits (the writing
 * transaction, then the sequence number, 16 each). Opaque to clients, but fixed-width, so ids
 * compare as strings in the order the feed lists events (docs/events.md#ids).
 *
 * @example formatEventId({ tx: 0n, seq: 42n }) // 'evt_0000000000000000000000000000002a'
 */
export function formatEventId({ tx, seq }: EventPosition): string {
  return PREFIX + hex16(tx) + hex16(seq);
}

/** The position an id names, or undefined for text that no event could have as its id. */
export function parseEventId(text: string): EventPosition | undefined {
  const match = SHAPE.exec(text);
  if (!match) return undefined;
  const position = { tx: BigInt(`0x${match[1]}`), seq: BigInt(`0x${match[2]}`) };
  // Sequence numbers are int64 (a store's query could not take a larger one).
  return position.seq <= INT64_MAX ? position : undefined;
}

/**
 * How many ids a millisecond holds in a clock floor: more events (on PostgreSQL, transactions)
 * than a database makes in a millisecond, so a counter that started at one floor stays below
 * the floor of any later millisecond.
 */
export const IDS_PER_MS = 1n << 20n;

/**
 * The least value a position's counter (SQLite's sequence number, PostgreSQL's event clock)
 * takes after it is moved to the time `ms` (Unix milliseconds): the millisecond after it, times
 * IDS_PER_MS. A database restored from an older copy moves its counter there, so its new ids
 * follow every id the database it replaces gave out, even when that one is gone: those came
 * from a floor of an earlier millisecond and at most IDS_PER_MS more per millisecond since
 * (docs/events.md#ids). Within int64 until the year 2248.
 *
 * @example clockFloorAt(Date.UTC(2026, 10, 22)) // 1882514364826648576n
 */
export function clockFloorAt(ms: number): bigint {
  return (BigInt(Math.floor(ms)) + 1n) * IDS_PER_MS;
}
