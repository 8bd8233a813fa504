import type { PetStatus } from '../schemas.js';
import type { KeyRecord, PetRecord } from './store.js';

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
