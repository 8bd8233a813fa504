import { systemClock, type Clock } from '../clock.js';
import type { ActiveKey, Store } from '../store/store.js';
import { batchKeyUses } from './uses.js';

// docs/keys.md#how-keys-work: a revoked key is refused within one second on every instance. An
// active key is remembered for half that, so most requests cost no database work for their key;
// never past its expiry, so an expired key is never served from memory.
const KEY_MEMORY_MS = 500;
const KEYS_REMEMBERED = 1000;

/**
 * `find` (the store's lookup of an active key by hash) with a short memory of the keys it
 * found, until KEY_MEMORY_MS later or the key's expiry, whichever comes first. Revocations and
 * rolls made through the same store take effect at once (`forget`); those made elsewhere
 * (another instance, the keys command) within KEY_MEMORY_MS.
 *
 * @example
 * const keys = rememberActiveKeys((hash) => lookUp(hash));
 * await keys.find(hash); // the database
 * await keys.find(hash); // memory, for the next 500 ms
 */
export function rememberActiveKeys(
  find: (hash: Buffer) => Promise<ActiveKey | undefined> | ActiveKey | undefined,
  clock: Clock = systemClock,
) {
  let remembered = new Map<string, { key: ActiveKey; until: number }>();
  const recall = (name: string, now: number) => {
    const known = remembered.get(name);
    return known && known.until > now ? known.key : undefined;
  };
  return {
    async find(hash: Buffer): Promise<ActiveKey | undefined> {
      const name = hash.toString('latin1');
      // Taken before the lookup: a revocation the lookup missed is at most KEY_MEMORY_MS old then.
      const now = clock.now();
      const known = recall(name, now);
      if (known) return known;
      const key = await find(hash);
      if (!key) return undefined;
      const until = Math.min(now + KEY_MEMORY_MS, key.expiresAt ?? Infinity);
      if (until <= now) return key;
      if (remembered.size >= KEYS_REMEMBERED) remembered = new Map();
      remembered.set(name, { key, until });
      return key;
    },
    /** The key `find` would answer from memory now, if any: no lookup, no promise. */
    remembered(hash: Buffer): ActiveKey | undefined {
      return recall(hash.toString('latin1'), clock.now());
    },
    forget(): void {
      remembered = new Map();
    },
  };
}

/** What the service keeps of its keys in this process's memory, synchronously where it can. */
export interface KeyMemory {
  /** The active key with this hash, when found active in the last 500 ms and not expired since. */
  rememberedKey(hash: Buffer): ActiveKey | undefined;
  /** The active key with this hash: from memory, or else from the store (see rememberActiveKeys). */
  findActiveKey(hash: Buffer): Promise<ActiveKey | undefined>;
  /**
   * Notes that key `id` was used at `now` (unix ms). Kept in memory; written in batches, at most
   * once a minute per key, off the request path (batchKeyUses). Never throws.
   */
  noteKeyUse(id: number, now: number): void;
  /** Notes that key `id` called a deprecated operation at `now`; kept and written as noteKeyUse's. */
  noteDeprecatedUse(id: number, now: number): void;
  /** Writes the uses not yet written; call it before closing the store. */
  close(): Promise<void>;
}

/**
 * The key memory and key-use batching of one instance, over the store's plain lookup and writes.
 *
 * @example
 * const keys = keyMemory(store);
 * keys.rememberedKey(hash) ?? (await keys.findActiveKey(hash));
 * await keys.close(); // then store.close()
 */
export function keyMemory(
  store: Pick<Store, 'findActiveKey' | 'writeKeyUses' | 'writeDeprecatedUses' | 'onKeysChanged'>,
  { clock = systemClock, keyUseFlushMs }: { clock?: Clock; keyUseFlushMs?: number } = {},
): KeyMemory {
  const activeKeys = rememberActiveKeys((hash) => store.findActiveKey(hash), clock);
  store.onKeysChanged(activeKeys.forget);
  const keyUses = batchKeyUses((uses) => store.writeKeyUses(uses), keyUseFlushMs);
  const deprecatedUses = batchKeyUses((uses) => store.writeDeprecatedUses(uses), keyUseFlushMs);
  return {
    rememberedKey: activeKeys.remembered,
    findActiveKey: activeKeys.find,
    noteKeyUse: keyUses.note,
    noteDeprecatedUse: deprecatedUses.note,
    close: async () => void (await Promise.all([keyUses.close(), deprecatedUses.close()])),
  };
}
