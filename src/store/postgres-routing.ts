import { CLIENT_GRACE_MS } from './postgres-connection.js';
import type { PostgresReads } from './postgres-reads.js';
import type { ReplicaSet } from './postgres-replicas.js';
import type { ReadNeeds } from './replica-policy.js';
import { StoreUnavailableError, type EventRecord, type Read, type Store } from './store.js';

// Keys whose last write is remembered; past it, every key is taken to have written just now.
const MARKS_KEPT = 100_000;

/**
 * When each key's last write through this instance was acknowledged (docs/operations.md#read-replicas:
 * a key reads its own writes). A write made for no key is seen by every read; a read made for no
 * key sees every write.
 */
function writeMarks() {
  let byKey = new Map<number, number>();
  let unkeyed = -Infinity;
  let latest = -Infinity;
  let floor = -Infinity;
  return {
    note(keyId: number | undefined, at: number): void {
      latest = Math.max(latest, at);
      if (keyId === undefined) {
        unkeyed = Math.max(unkeyed, at);
        return;
      }
      if (byKey.size >= MARKS_KEPT && !byKey.has(keyId)) {
        floor = latest;
        byKey = new Map();
      }
      byKey.set(keyId, at);
    },
    of(keyId: number | undefined): number {
      return keyId === undefined ? latest : Math.max(byKey.get(keyId) ?? floor, unkeyed);
    },
  };
}

/**
 * `primary` with its reads of the animals and the feed sent to the replicas of `set` that are
 * in use (replica-policy.ts chooses, from memory), and its key checks to a replica while the
 * primary does not answer. Everything else, writes first, goes to the primary. A read a replica
 * fails, or a pet it does not have yet, is asked of the primary instead, within what is left of
 * `timeoutMs` since the read began, so no read waits much past the bound in all.
 */
export function routeReads(primary: Store, set: ReplicaSet, timeoutMs: number): Store {
  const writes = writeMarks();
  const anyone: ReadNeeds = { wroteAt: -Infinity, atLeast: -1n };

  /** `read`, failed with StoreUnavailableError unless it settles by the bound of a read begun at `started`. */
  function within<T>(read: Read<T>, started: number): Promise<T> {
    if (!(read instanceof Promise)) return Promise.resolve(read);
    const left = started + timeoutMs + CLIENT_GRACE_MS - set.now();
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new StoreUnavailableError(new Error(`no answer within ${timeoutMs} ms`))),
        Math.max(0, left),
      );
      read.then(
        (value) => (clearTimeout(timer), resolve(value)),
        (error: unknown) => (clearTimeout(timer), reject(error)),
      );
    });
  }

  /**
   * A read with `needs`: `read` on the replica chosen for it, else `onPrimary`. A read the replica
   * fails, or an answer it `lacks` (a pet it does not have yet), is asked of the primary, within
   * the read's bound. `count`: counted as a read of the animals or the feed (not a key check).
   */
  function route<T>(
    needs: ReadNeeds,
    onPrimary: () => Read<T>,
    read: (reads: PostgresReads, index: number) => Promise<T>,
    { count = true, lacks }: { count?: boolean; lacks?: (answer: T) => boolean } = {},
  ): Read<T> {
    const started = set.now();
    const index = set.choose(needs, started, count);
    if (index < 0) return onPrimary();
    return read(set.replicas[index]!.reads, index).then(
      (answer) => (lacks?.(answer) ? within(onPrimary(), started) : answer),
      (error: unknown) => {
        if (error instanceof StoreUnavailableError) set.unreachable(index);
        return within(onPrimary(), started);
      },
    );
  }

  const needsOf = (keyId: number | undefined, atLeast = -1n): ReadNeeds => ({ wroteAt: writes.of(keyId), atLeast });

  return {
    ...primary,
    replication: set.replication,

    async createPet(pet, keyId) {
      const created = await primary.createPet(pet);
      writes.note(keyId, set.now());
      return created;
    },

    async createPetOnce(pet, claim, respond) {
      try {
        return await primary.createPetOnce(pet, claim, respond);
      } finally {
        writes.note(claim.apiKeyId, set.now());
      }
    },

    getPet(id, keyId) {
      // A pet the replica does not have yet may be one just created: the primary has it.
      return route(
        needsOf(keyId),
        () => primary.getPet(id),
        (reads) => reads.getPet(id),
        { lacks: (pet) => pet === undefined },
      );
    },

    listPets(query, keyId) {
      return route(
        needsOf(keyId, query.atLeast),
        () => primary.listPets(query),
        async (reads, index) => {
          const page = await reads.listPets(query);
          if (page.readAt !== undefined) set.sawReplayed(index, page.readAt);
          return page;
        },
      );
    },

    listEvents(query, keyId) {
      return route(
        needsOf(keyId),
        () => primary.listEvents(query),
        (reads) => reads.listEvents(query),
      ) as Promise<EventRecord[]>;
    },

    // On the primary, so a revocation is refused within a second (keys/memory.ts); on a replica
    // in use only while the primary does not answer.
    async findActiveKey(hash) {
      const started = set.now();
      if (set.primaryAnswering(started)) {
        try {
          return await primary.findActiveKey(hash);
        } catch (error) {
          const index = error instanceof StoreUnavailableError ? set.choose(anyone, started, false) : -1;
          if (index < 0) throw error;
          return within(set.replicas[index]!.reads.findActiveKey(hash), started);
        }
      }
      return route(
        anyone,
        () => primary.findActiveKey(hash),
        (reads) => reads.findActiveKey(hash),
        { count: false },
      );
    },

    // Ready while reads can be answered: by the primary, or by a replica in use.
    async ping() {
      const replicaInUse = () => set.choose(anyone, set.now(), false) >= 0;
      if (!set.primaryAnswering(set.now()) && replicaInUse()) return;
      try {
        await primary.ping();
      } catch (error) {
        if (!replicaInUse()) throw error;
      }
    },

    async close() {
      await set.close();
      await primary.close();
    },
  };
}
