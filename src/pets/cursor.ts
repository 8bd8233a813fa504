import { INT64_MAX, petStatuses, type PetStatus } from '../schemas.js';

export interface Cursor {
  afterId: bigint;
  status: PetStatus | undefined;
}

const SHAPE = new RegExp(`^(${petStatuses.join('|')})?:([1-9][0-9]{0,18})$`);

/** Opaque to clients: base64url of `<status>:<last id>`. */
export function encodeCursor({ afterId, status }: Cursor): string {
  return Buffer.from(`${status ?? ''}:${afterId}`).toString('base64url');
}

/** The cursor's content, or undefined for one the service could not have issued. */
export function decodeCursor(text: string): Cursor | undefined {
  const match = SHAPE.exec(Buffer.from(text, 'base64url').toString('latin1'));
  if (!match) return undefined;
  const cursor = { afterId: BigInt(match[2]!), status: match[1] as PetStatus | undefined };
  // Ids are int64, so a larger one was never issued (and would overflow the store's query).
  if (cursor.afterId > INT64_MAX) return undefined;
  // Only the canonical encoding is one the service issued.
  return encodeCursor(cursor) === text ? cursor : undefined;
}
