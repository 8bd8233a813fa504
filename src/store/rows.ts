import type { PetStatus } from '../schemas.js';
import type { IdempotencyClaim, KeyRecord, OnceOutcome, PetRecord, StoredResponse } from './store.js';

/** A `pets` row as both stores read it: int64 columns as `bigint`. */
export interface PetRow {
  id: bigint;
  name: string;
  category_id: bigint;
  status: PetStatus;
}

/** An `api_keys` row: SQLite keeps times as ISO 8601 text, PostgreSQL as timestamptz. */
export interface KeyRow {
  id: bigint;
  name: string;
  hint: string;
  created_at: string | Date;
  revoked_at: string | Date | null;
}

export const toPet = (row: PetRow): PetRecord => ({
  id: row.id,
  name: row.name,
  categoryId: row.category_id,
  status: row.status,
});

export const toKey = (row: KeyRow): KeyRecord => ({
  id: Number(row.id),
  name: row.name,
  hint: row.hint,
  createdAt: new Date(row.created_at),
  revokedAt: row.revoked_at === null ? null : new Date(row.revoked_at),
});

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
