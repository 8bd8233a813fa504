import type { PetStatus } from '../schemas.js';

export interface PetRecord {
  id: bigint;
  name: string;
  categoryId: bigint;
  status: PetStatus;
}

export type NewPetRecord = Omit<PetRecord, 'id'>;

export interface ListQuery {
  status?: PetStatus;
  /** Only animals with a greater id: keyset paging, never OFFSET. */
  afterId?: bigint;
  limit: number;
}

export interface KeyRecord {
  id: number;
  name: string;
  hint: string;
  createdAt: Date;
  revokedAt: Date | null;
}

export interface NewKeyRecord {
  name: string;
  hint: string;
  hash: Buffer;
  createdAt: Date;
}

/** What the first answer to an idempotent request was, replayed to its retries. */
export interface StoredResponse {
  status: number;
  /** The body exactly as sent. */
  body: string;
  location: string;
}

/** A create that happens at most once per (API key, idempotency key) until `expiresAt`. */
export interface IdempotencyClaim {
  apiKeyId: number;
  key: string;
  /** SHA-256 of the request body's canonical form: the same body means the same request. */
  fingerprint: Buffer;
  /** Unix ms; an older claim with the same key is gone and the key is free again. */
  now: number;
  expiresAt: number;
}

export type OnceOutcome =
  | { kind: 'created'; response: StoredResponse }
  | { kind: 'replayed'; response: StoredResponse }
  /** The key was used for a different body. */
  | { kind: 'mismatch' }
  /** Another request with the key is being processed right now (on any instance). */
  | { kind: 'in_flight' };

/**
 * Everything the service keeps. Implementations know SQL; nothing above them does, and they
 * know nothing of HTTP.
 */
export interface Store {
  /**
   * Applies the migrations not yet applied; returns their names. `onApplied` hears of each one
   * as soon as it has run, so a long migration shows progress.
   */
  migrate(onApplied?: (name: string, ms: number) => void): Promise<string[]>;
  /** Resolves when the database answers; rejects when it does not. */
  ping(): Promise<void>;

  /** Resolves once the animal is durable. */
  createPet(pet: NewPetRecord): Promise<PetRecord>;
  /**
   * Creates the animal unless `claim` was already used: then the stored first response.
   * The animal and the response `respond` makes for it are stored in one transaction.
   */
  createPetOnce(
    pet: NewPetRecord,
    claim: IdempotencyClaim,
    respond: (pet: PetRecord) => StoredResponse,
  ): Promise<OnceOutcome>;
  getPet(id: bigint): Promise<PetRecord | undefined>;
  /** Ascending id. */
  listPets(query: ListQuery): Promise<PetRecord[]>;
  /** How many animals have each status right now; every status is present, 0 when none. */
  countPetsByStatus(): Promise<Record<PetStatus, number>>;

  createKey(key: NewKeyRecord): Promise<KeyRecord>;
  /** The hash of the active (not revoked) key with this hash, if any. */
  findActiveKey(hash: Buffer): Promise<{ id: number; hash: Buffer } | undefined>;
  listKeys(): Promise<KeyRecord[]>;
  /** Creates the key only if the store has no key at all, atomically; else undefined. */
  createFirstKey(key: NewKeyRecord): Promise<KeyRecord | undefined>;
  /** False when no active key has this id. */
  revokeKey(id: number, at: Date): Promise<boolean>;

  /**
   * Counts one hit for `subject` in the fixed window starting at `windowStart` (unix ms) and
   * returns the hits counted so far in it, on every instance sharing the store.
   */
  countHit(subject: string, windowStart: number): Promise<number>;

  close(): Promise<void>;
}

/**
 * The database did not answer: refused, dropped, shut down or too slow. Callers answer 503
 * `unavailable`; the cause is for the log only.
 */
export class StoreUnavailableError extends Error {
  constructor(cause: unknown) {
    super(`The database cannot be reached: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = 'StoreUnavailableError';
  }
}
