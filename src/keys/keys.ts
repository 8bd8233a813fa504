import crypto, { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX = 'psk_';
// 32 random bytes, base64url: 43 characters, 256 bits of entropy.
const KEY_PATTERN = /^psk_[A-Za-z0-9_-]{43}$/;

/** Makes a new API key: `psk_` and 43 URL-safe characters from 32 random bytes. */
export function makeKey(): string {
  return PREFIX + randomBytes(32).toString('base64url');
}

/**
 * The stored form of a key. Keys carry 256 random bits, so a fast hash is as safe as a slow
 * one here and keeps authentication cheap on every request.
 */
export function hashKey(key: string): Buffer {
  return sha256(key);
}

// crypto.hash (one call, no Hash object: about half the time) from Node 20.12 on; the service
// runs on every Node 20.
const sha256: (text: string) => Buffer =
  typeof crypto.hash === 'function'
    ? (text) => crypto.hash('sha256', text, 'buffer')
    : (text) => createHash('sha256').update(text).digest();

/** The first characters of a key, shown by `keys list` so a person can tell keys apart. */
export function keyHint(key: string): string {
  return key.slice(0, PREFIX.length + 6) + '…';
}

export function looksLikeKey(token: string): boolean {
  return KEY_PATTERN.test(token);
}

export function sameHash(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** What a key may do: listPets and getPet, createPet, `GET /metrics`, and listEvents (docs/keys.md). */
export const scopes = ['pets:read', 'pets:write', 'metrics:read', 'events:read'] as const;
export type Scope = (typeof scopes)[number];

/**
 * What a key holds when issued without `--scope`, as every key issued before scopes existed:
 * the first three. `events:read` is given only when asked for.
 */
export const defaultScopes: readonly Scope[] = ['pets:read', 'pets:write', 'metrics:read'];

export function isScope(word: string): word is Scope {
  return (scopes as readonly string[]).includes(word);
}
