import { systemClock, type Clock } from '../clock.js';
import type { ActiveKey } from './store.js';

// docs/keys.md#how-keys-work: a revoked key is refused within one second on every instance. An active key is
// remembered for half that, so most requests cost no database work for their key; never past
// its expiry, so an expired key is never served from memory.
const KEY_MEMORY_MS = 500;
const KEYS_REMEMBERED = 1000;

/**
 * `find` (the store's lookup of an active key by hash) with a short memory of the keys it
 * found, until KEY_MEMORY_MS later or the key's expiry, whichever comes first. Revocations and
 * rolls made through this store take effect at once (`forget`); those made elsewhere (another
 * instance, the keys command) within KEY_MEMORY_MS.
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
