import { INT64_MAX, petStatuses, type PetStatus } from '../schemas.js';

export interface Cursor {
  afterId: bigint;
  status: PetStatus | undefined;
  /**
   * The WAL position the page before was read at, with read replicas (docs/operations.md#read-replicas):
   * the next page is read where at least that much is replayed.
   */
  readAt?: bigint;
}

const SHAPE = new RegExp(`^(${petStatuses.join('|')})?:([1-9][0-9]{0,18})(?:@(0|[1-9][0-9]{0,19}))?$`);
// A WAL position is an unsigned 64-bit number.
const LSN_MAX = 2n ** 64n - 1n;

/** Opaque to clients: base64url of `<status>:<last id>`, and `@<position>` when the page has one. */
export function encodeCursor({ afterId, status, readAt }: Cursor): string {
  const at = readAt === undefined ? '' : `@${readAt}`;
  return Buffer.from(`${status ?? ''}:${afterId}${at}`).toString('base64url');
}

/** The cursor's content, or undefined for one the service could not have issued. */
export function decodeCursor(text: string): Cursor | undefined {
  const match = SHAPE.exec(Buffer.from(text, 'base64url').toString('latin1'));
  if (!match) return undefined;
  const cursor: Cursor = { afterId: BigInt(match[2]!), status: match[1] as PetStatus | undefined };
  if (match[3] !== undefined) cursor.readAt = BigInt(match[3]);
  // Ids are int64, so a larger one was never issued (and would overflow the store's query).
  if (cursor.afterId > INT64_MAX || (cursor.readAt ?? 0n) > LSN_MAX) return undefined;
  // Only the canonical encoding is one the service issued.
  return encodeCursor(cursor) === text ? cursor : undefined;
}
