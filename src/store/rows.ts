import { defaultScopes, scopes as allScopes, type PetStatus, type Scope } from '../schemas.js';
import type {
  ActiveKey,
  EventRecord,
  IdempotencyClaim,
  KeyRecord,
  OnceOutcome,
  PetRecord,
  StoredResponse,
} from './store.js';

/** A `pets` row as both stores read it: int64 columns as `bigint`. */
export interface PetRow {
  id: bigint;
  name: string;
  category_id: bigint;
  status: PetStatus;
}

type Time = string | Date;

/** An `api_keys` row: SQLite keeps times as ISO 8601 text, PostgreSQL as timestamptz. */
export interface KeyRow {
  id: bigint;
  name: string;
  hint: string;
  scopes: string;
  created_at: Time;
  expires_at: Time | null;
  revoked_at: Time | null;
  last_used_at: Time | null;
  last_deprecated_use_at: Time | null;
  replaced_by: bigint | null;
}

export const KEY_COLUMNS =
  'id, name, hint, scopes, created_at, expires_at, revoked_at, last_used_at, last_deprecated_use_at, replaced_by';

/** What `findActiveKey` reads of a key that is not revoked. */
export interface ActiveKeyRow {
  id: bigint;
  hash: Buffer;
  scopes: string;
  expires_at: Time | null;
}

export const ACTIVE_KEY_COLUMNS = 'id, hash, scopes, expires_at';

/** The `scopes` column: space-separated scope names, as OAuth writes them. */
export const writeScopes = (list: readonly Scope[] = defaultScopes): string => list.join(' ');

// Written by writeScopes only; a word this version does not know grants nothing.
const readScopes = (text: string): Scope[] => allScopes.filter((scope) => text.split(' ').includes(scope));

const toDate = (time: Time | null): Date | null => (time === null ? null : new Date(time));

export const toActiveKey = (row: ActiveKeyRow): ActiveKey => ({
  id: Number(row.id),
  hash: row.hash,
  scopes: readScopes(row.scopes),
  expiresAt: row.expires_at === null ? null : new Date(row.expires_at).getTime(),
});

export const toPet = (row: PetRow): PetRecord => ({
  id: row.id,
  name: row.name,
  categoryId: row.category_id,
  status: row.status,
});

/**
 * A created animal's event data: the Pet as createPet's 201 writes it (the schema's order, every
 * int64 digit), so an event's `data` and the 201 body are the same bytes. PostgreSQL builds the
 * same text in SQL (postgres.ts, PET_JSON); test/events-outbox.test.ts holds both to the 201.
 */
export const petJson = (pet: PetRecord): string =>
  `{"id":${pet.id},"name":${JSON.stringify(pet.name)},"categoryId":${pet.categoryId},"status":"${pet.status}"}`;

/** An `events` row as both stores read it: SQLite keeps the time as ISO 8601 text (and has no tx: 0). */
export interface EventRow {
  tx: bigint;
  seq: bigint;
  type: 'pet.created';
  created_at: Time;
  data: string;
}

export const toEvent = (row: EventRow): EventRecord => ({
  position: { tx: row.tx, seq: row.seq },
  type: row.type,
  createdAt: new Date(row.created_at),
  data: row.data,
});

export const toKey = (row: KeyRow): KeyRecord => ({
  id: Number(row.id),
  name: row.name,
  hint: row.hint,
  scopes: readScopes(row.scopes),
  createdAt: new Date(row.created_at),
  expiresAt: toDate(row.expires_at),
  revokedAt: toDate(row.revoked_at),
  lastUsedAt: toDate(row.last_used_at),
  lastDeprecatedUseAt: toDate(row.last_deprecated_use_at),
  replacedBy: row.replaced_by === null ? null : Number(row.replaced_by),
});

/**
 * Why key `row` cannot be rolled at `at`, or undefined when it can: the one rule both stores
 * apply inside the roll's transaction.
 */
export function refuseRoll(row: KeyRow | undefined, at: Date) {
  if (!row) return { kind: 'unknown' } as const;
  if (row.revoked_at !== null) return { kind: 'revoked' } as const;
  if (row.replaced_by !== null) return { kind: 'replaced', by: Number(row.replaced_by) } as const;
  if (row.expires_at !== null && new Date(row.expires_at) <= at) return { kind: 'expired' } as const;
  return undefined;
}

/** `SELECT status, count(*) … GROUP BY status` rows as a count for every status, 0 when absent. */
export function countByStatus(rows: { status: PetStatus; count: bigint | number }[]): Record<PetStatus, number> {
  const counts: Record<PetStatus, number> = { available: 0, pending: 0, sold: 0 };
  for (const row of rows) counts[row.status] = Number(row.count);
  return counts;
}

/** Expired idempotency keys deleted per create that uses a key: cleanup without a separate job. */
export const EXPIRED_PER_CREATE = 100;

/** An `idempotency_keys` row: SQLite reads its INTEGER columns as `bigint`, PostgreSQL int4 as a number. */
export interface IdempotencyRow {
  fingerprint: Buffer;
  response_status: number | bigint;
  response_body: string;
  response_location: string;
  expires_at: bigint;
}

/** What a stored row means for `claim`: its replay, a mismatch, or undefined when the key is free. */
export function replayFor(row: IdempotencyRow | undefined, claim: IdempotencyClaim): OnceOutcome | undefined {
  if (!row || row.expires_at <= claim.now) return undefined;
  if (!row.fingerprint.equals(claim.fingerprint)) return { kind: 'mismatch' };
  const response = { status: Number(row.response_status), body: row.response_body, location: row.response_location };
  return { kind: 'replayed', response };
}

/** The `idempotency_keys` values after `api_key_id`, in column order. */
export function idempotencyValues(claim: IdempotencyClaim, response: StoredResponse) {
  return [claim.key, claim.fingerprint, response.status, response.body, response.location, claim.now, claim.expiresAt];
}
