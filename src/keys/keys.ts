import crypto, { randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX = 'psk_';

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

// crypto.hash: one call, no Hash object; every Node.js src/runtime.ts accepts has it.
const sha256 = (text: string): Buffer => crypto.hash('sha256', text, 'buffer');

/** The first characters of a key, shown by `keys list` so a person can tell keys apart. */
export function keyHint(key: string): string {
  return key.slice(0, PREFIX.length + 6) + '…';
}

export function sameHash(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
