import type { Store } from '../store/store.js';
import { hashKey, keyHint, makeKey } from './keys.js';

export interface Output {
  out: (line: string) => void;
  err: (line: string) => void;
}

/** Issues a key and returns it with its record; the key itself is never stored. */
export async function issueKey(store: Store, name: string, now = new Date()) {
  const key = makeKey();
  const record = await store.createKey({ name, hint: keyHint(key), hash: hashKey(key), createdAt: now });
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

export async function createKeyCommand(store: Store, name: string, json: boolean, io: Output) {
  const { key, record } = await issueKey(store, name);
  if (json) {
    io.out(JSON.stringify({ id: record.id, name: record.name, key, createdAt: record.createdAt.toISOString() }));
    return;
  }
  io.out(key);
  io.err(`Created key ${record.id} (${record.name}). It is shown only this once: keep it somewhere safe.`);
}

export async function listKeysCommand(store: Store, json: boolean, io: Output) {
  const keys = await store.listKeys();
  if (json) {
    for (const k of keys) {
      io.out(
        JSON.stringify({
          id: k.id,
          name: k.name,
          hint: k.hint,
          createdAt: k.createdAt.toISOString(),
          revokedAt: k.revokedAt?.toISOString() ?? null,
        }),
      );
    }
    return;
  }
  io.out(['ID', 'NAME', 'KEY', 'CREATED', 'REVOKED'].join('\t'));
  for (const k of keys) {
    io.out([k.id, k.name, k.hint, k.createdAt.toISOString(), k.revokedAt?.toISOString() ?? '-'].join('\t'));
  }
}

/** @returns false when no active key has this id. */
export async function revokeKeyCommand(store: Store, id: number, io: Output): Promise<boolean> {
  const revoked = await store.revokeKey(id, new Date());
  if (revoked) io.err(`Revoked key ${id}. Every instance refuses it within one second.`);
  else io.err(`No active key has id ${id}; see 'petstore keys list'.`);
  return revoked;
}
