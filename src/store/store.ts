import type { PetStatus, Scope } from '../schemas.js';
import type { EventPosition, EventQuery, EventRecord } from './event-records.js';
import type { WebhookStore } from './webhooks.js';

export type { EventPosition, EventQuery, EventRecord };

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
  /**
   * The position the page before was read at (PetPage's readAt): this one is read from a
   * database that has replayed at least that much, so it misses nothing the page before saw.
   */
  atLeast?: bigint;
}

/**
 * A page of animals, ascending id. `readAt` (not enumerable): the PostgreSQL WAL position the
 * page was read at, when read replicas are configured (docs/operations.md#read-replicas); the next
 * page's cursor carries it, as ListQuery's atLeast.
 */
export type PetPage = PetRecord[] & { readAt?: bigint };

export interface KeyRecord {
  id: number;
  name: string;
  hint: string;
  scopes: Scope[];
  createdAt: Date;
  /** From this instant on the key is refused; null: never. */
  expiresAt: Date | null;
  revokedAt: Date | null;
  /** When a request last used it, as written at most once a minute per instance; null: never. */
  lastUsedAt: Date | null;
  /** When a request last called a deprecated operation (getPet) with it, written like lastUsedAt; null: never. */
  lastDeprecatedUseAt: Date | null;
  /** The id of the key `keys roll` issued to replace it. */
  replacedBy: number | null;
}

export interface NewKeyRecord {
  name: string;
  hint: string;
  hash: Buffer;
  createdAt: Date;
  /** pets:read, pets:write and metrics:read when absent, as every key issued before scopes existed. */
  scopes?: Scope[];
  expiresAt?: Date | null;
}

/** A successor for key `id` (`keys roll`): its name and scopes are the old key's. */
export interface KeyRoll {
  id: number;
  successor: Omit<NewKeyRecord, 'name' | 'scopes'>;
  /** The old key expires then, or earlier when it already would. */
  oldExpiresAt: Date;
  /** Now: a key expired by then cannot be rolled. */
  at: Date;
}

export type RollOutcome =
  | { kind: 'rolled'; old: KeyRecord; successor: KeyRecord }
  | { kind: 'unknown' }
  | { kind: 'revoked' }
  | { kind: 'expired' }
  /** Another roll replaced it first (perhaps at this very moment): never two successors. */
  | { kind: 'replaced'; by: number };

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
 * A key that is not revoked, as the stores find it: its id, stored hash, scopes and expiry.
 * It may have expired: callers compare `expiresAt` (unix ms, null: never) with their clock.
 */
export interface ActiveKey {
  id: number;
  hash: Buffer;
  scopes: readonly Scope[];
  expiresAt: number | null;
}

/** A key's use to write: the key's id and when (unix ms). */
export interface KeyUse {
  id: number;
  /** Unix ms. */
  at: number;
}

/**
 * A read's answer: the value itself when the store has it at once (SQLite, reading in the
 * calling turn with no lock in the way), else a promise of it. A failure is always a rejected
 * promise, never a throw. `await` takes either; code on every request tells them apart
 * (`instanceof Promise`) and makes no promise for a value it already has.
 */
export type Read<T> = T | Promise<T>;

/**
 * Everything the service keeps. Implementations know SQL; nothing above them does, and they
 * know nothing of HTTP.
 */
export interface Store {
  /**
   * True when ids become visible in ascending order and animals are never changed or removed,
   * so a page of animals that another animal follows never changes (SQLite, whose writers take
   * turns). PostgreSQL takes ids from a sequence before commit, so a lower id can become visible
   * after a higher one: false there.
   */
  readonly idsVisibleInOrder: boolean;
  /** Webhook endpoints, their deliveries and attempts (docs/webhooks.md). */
  readonly webhooks: WebhookStore;
  /** The read replicas and how each is used (PostgreSQL with DATABASE_READ_URLS); absent without. */
  readonly replication?: Replication;

  /**
   * Applies the migrations not yet applied; returns their names. `onApplied` hears of each one
   * as soon as it has run, so a long migration shows progress.
   */
  migrate(onApplied?: (name: string, ms: number) => void): Promise<string[]>;
  /** Resolves when the database answers; rejects when it does not. */
  ping(): Promise<void>;
  /** A write that reaches the disk as a create does, and leaves nothing behind. */
  probeWrite(): Promise<void>;
  /** True when `error` says the disk failed (full, or an I/O error), not the request. */
  isDiskError(error: unknown): boolean;

  /**
   * Resolves once the animal is durable, with its `pet.created` event, written in the same
   * transaction (the outbox: docs/events.md), its `createdAt` read from the store's clock.
   */
  createPet(pet: NewPetRecord, keyId?: number): Promise<PetRecord>;
  /**
   * Creates the animal unless `claim` was already used: then the stored first response.
   * The animal, its event and the response `respond` makes for it are stored in one transaction;
   * a replay or a mismatch writes nothing.
   */
  createPetOnce(
    pet: NewPetRecord,
    claim: IdempotencyClaim,
    respond: (pet: PetRecord) => StoredResponse,
  ): Promise<OnceOutcome>;
  /**
   * Answers at once where the store can (see Read). `keyId`, the API key the read is made for:
   * it sees what the key wrote through this store (createPet's keyId), whichever database
   * answers (docs/operations.md#read-replicas); none: it sees everything written through it.
   */
  getPet(id: bigint, keyId?: number): Read<PetRecord | undefined>;
  /** Ascending id. Answers at once where the store can (see Read); `keyId` as getPet's. */
  listPets(query: ListQuery, keyId?: number): Read<PetPage>;
  /**
   * How many animals have each status, counted at most PET_COUNTS_MAX_AGE_MS ago; every status
   * is present, 0 when none. Cheap whatever the number of animals: no scan on each call.
   */
  countPetsByStatus(): Promise<Record<PetStatus, number>>;

  /**
   * Events in position order, after `query.after`. Never one before an event that is not yet
   * visible: a page, once listed, is never followed by an event that sorts before its last one,
   * whatever the instances write meanwhile, whichever database answers. `keyId` as getPet's.
   */
  listEvents(query: EventQuery, keyId?: number): Promise<EventRecord[]>;
  /**
   * Deletes events created before `before`, at most `limit`, oldest first; resolves to how many.
   * Looks at no more than the `limit` oldest events: bounded work whatever the table holds.
   */
  pruneEvents(before: Date, limit: number): Promise<number>;

  createKey(key: NewKeyRecord): Promise<KeyRecord>;
  /**
   * The key with this hash unless it is revoked (an expired one too: see ActiveKey), if any,
   * read from the database on every call.
   */
  findActiveKey(hash: Buffer): Promise<ActiveKey | undefined>;
  /**
   * Sets each key's last use to `at` unless a later one is written already (another instance's).
   * May fail at once rather than wait for a database another process holds: the caller keeps
   * the uses and tries again later.
   */
  writeKeyUses(uses: KeyUse[]): Promise<void>;
  /** Sets each key's last call of a deprecated operation, as writeKeyUses sets its last use. */
  writeDeprecatedUses(uses: KeyUse[]): Promise<void>;
  listKeys(): Promise<KeyRecord[]>;
  /**
   * Issues a successor to a key that is neither revoked, expired nor already replaced, and sets
   * the old key's expiry, in one transaction; of two rolls of one key at once, one wins.
   */
  rollKey(roll: KeyRoll): Promise<RollOutcome>;
  /** Creates the key only if the store has no key at all, atomically; else undefined. */
  createFirstKey(key: NewKeyRecord): Promise<KeyRecord | undefined>;
  /** False when no active key has this id. */
  revokeKey(id: number, at: Date): Promise<boolean>;
  /**
   * Calls `listener` as each revocation or roll is made through this store, so what is kept of
   * the keys above it (keys/memory.ts) is dropped at once; one made elsewhere is not heard of.
   */
  onKeysChanged(listener: () => void): void;

  /**
   * Adds `hits[i]` to `subjects[i]`'s count in the window starting at `windowStart` (unix ms),
   * for every instance that shares the database, and resolves to those subjects' totals after it.
   */
  addHits(windowStart: number, subjects: string[], hits: number[]): Promise<Map<string, number>>;

  close(): Promise<void>;
}

/** Why a replica is not read from (docs/operations.md#read-replicas). */
export type LeftOut =
  /** Its last check failed or did not answer in time, or a read found it unreachable. */
  | 'unreachable'
  /** Not in recovery: promoted, or not a replica at all. */
  | 'promoted'
  /** A replica of another cluster than DATABASE_URL's. */
  | 'other_cluster'
  /** Its replay is paused (pg_wal_replay_pause()). */
  | 'paused'
  /** Not measured against the primary yet. */
  | 'unmeasured'
  /** Further behind than PETSTORE_REPLICA_MAX_LAG_MS (taken back within half of it). */
  | 'lagging';

/** One replica as this instance sees it. */
export interface ReplicaState {
  /** host:port/database: no user name, password or parameters. */
  name: string;
  state: 'in_use' | LeftOut;
  /** How far behind the primary it was last measured, in ms; null when not measured. */
  lagMs: number | null;
  /** Reads this instance sent it. */
  reads: number;
}

/** A change /readyz's log reports: a replica left out or taken back, the primary lost or found. */
export type ReplicationChange =
  { kind: 'replica'; replica: ReplicaState; was: ReplicaState['state'] } | { kind: 'primary'; answering: boolean };

/** The read replicas of a PostgreSQL store (docs/operations.md#read-replicas), as last measured. */
export interface Replication {
  /** host:port/database of the primary (DATABASE_URL). */
  readonly primaryName: string;
  /** Whether the primary answered its last check in time. */
  primaryAnswering(): boolean;
  /** Reads this instance sent the primary. */
  primaryReads(): number;
  replicas(): ReplicaState[];
  /**
   * Calls `listener` on each change, as the background checks find it; at once, with what the
   * checks made before it found (each replica as a change from `unmeasured`).
   */
  onChange(listener: (change: ReplicationChange) => void): void;
}

/** How old countPetsByStatus's answer may be (PostgreSQL caches a GROUP BY; SQLite's is exact). */
export const PET_COUNTS_MAX_AGE_MS = 5000;

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
