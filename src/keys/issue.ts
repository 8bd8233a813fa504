import type { Store } from '../store/store.js';
import type { Scope } from '../schemas.js';
import { hashKey, keyHint, makeKey } from './keys.js';

/** Issues a key and returns it with its record; the key itself is never stored. */
export async function issueKey(
  store: Store,
  name: string,
  now = new Date(),
  { scopes, expiresAt = null }: { scopes?: Scope[]; expiresAt?: Date | null } = {},
) {
  const key = makeKey();
  const record = await store.createKey({
    name,
    hint: keyHint(key),
    hash: hashKey(key),
    createdAt: now,
    scopes,
    expiresAt,
  });
  return { key, record };
}

/**
 * On a store with no key at all, issues one named `first` and returns it; else undefined.
 * Atomic, so instances starting together issue one key between them.
 */
export async function issueFirstKey(store: Store, now = new Date()) {
  const key = makeKey();
  const record = await store.createFirstKey({ name: 'first', hint: keyHint(key), hash: hashKey(key), createdAt: now });
  return record && { key, record };
}
