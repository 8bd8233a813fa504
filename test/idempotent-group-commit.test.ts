import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import type { IdempotencyClaim, PetRecord, StoredResponse } from '../src/store/store.js';
import { tempSqliteStore } from './helpers.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, startServer } from './process.js';

// The SQLite store writes creates with an Idempotency-Key in the same group commit as plain ones:
// one IMMEDIATE transaction per turn of the event loop, each claim checked and stored in it, each
// with its own outcome.

const NOW = Date.UTC(2026, 10, 22);
const pet = { name: 'Rex', categoryId: 7n, status: 'available' as const };

const claim = (apiKeyId: number, key: string, body = 'a'): IdempotencyClaim => ({
  apiKeyId,
  key,
  fingerprint: createHash('sha256').update(body).digest(),
  now: NOW,
  expiresAt: NOW + 86_400_000,
});

const respond = (created: PetRecord): StoredResponse => ({
  status: 201,
  body: `{"id":${created.id}}`,
  location: `/v1/pets/${created.id}`,
});

async function storeWithKey(t: TestContext) {
  const { store, path } = await tempSqliteStore(t);
  const key = await store.createKey({ name: 'owner', hint: 'psk_abcd', hash: randomBytes(32), createdAt: new Date() });
  const observer = new Database(path);
  t.after(() => observer.close());
  const count = (table: string) => observer.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number;
  return { store, apiKeyId: key.id, observer, count };
}

test('creates with and without a key made in one turn each get their own outcome; a failing claim fails alone', async (t) => {
  const { store, apiKeyId, count } = await storeWithKey(t);
  const first = await store.createPetOnce(pet, claim(apiKeyId, 'taken'), respond);
  assert.equal(first.kind, 'created');

  const outcomes = await Promise.allSettled([
    store.createPetOnce(pet, claim(apiKeyId, 'new'), respond),
    store.createPetOnce(pet, claim(apiKeyId, 'taken'), () => {
      throw new Error('a replay makes no new response');
    }),
    store.createPetOnce(pet, claim(apiKeyId, 'taken', 'b'), respond),
    store.createPet(pet),
    store.createPetOnce(pet, claim(apiKeyId, 'refused'), () => {
      throw new Error('the response could not be made');
    }),
    store.createPetOnce(pet, claim(apiKeyId, 'also new'), respond),
  ]);
  const [created, replayed, mismatch, plain, refused, alsoCreated] = outcomes;
  assert.equal(created.status === 'fulfilled' && created.value.kind, 'created');
  assert.deepEqual(
    replayed.status === 'fulfilled' && replayed.value,
    first.kind === 'created' && { ...first, kind: 'replayed' },
  );
  assert.deepEqual(mismatch.status === 'fulfilled' && mismatch.value, { kind: 'mismatch' });
  assert.equal(plain.status === 'fulfilled' && plain.value.name, 'Rex');
  assert.equal(refused.status === 'rejected' && (refused.reason as Error).message, 'the response could not be made');
  assert.equal(alsoCreated.status === 'fulfilled' && alsoCreated.value.kind, 'created');

  // The first, 'new', the plain one and 'also new'; nothing of the refused claim.
  assert.equal(count('pets'), 4);
  assert.equal(count('idempotency_keys'), 3);
  // A claim that failed is not remembered: the key creates now.
  assert.equal((await store.createPetOnce(pet, claim(apiKeyId, 'refused'), respond)).kind, 'created');
});

test('50 idempotent creates made at the same moment share one transaction, each durable with its own id', async (t) => {
  const { store, apiKeyId, observer } = await storeWithKey(t);
  const outcomes = await Promise.all(
    Array.from({ length: 50 }, (_, i) => store.createPetOnce(pet, claim(apiKeyId, `k${i}`), respond)),
  );
  const locations = outcomes.map((outcome) => (outcome.kind === 'created' ? outcome.response.location : ''));
  assert.equal(new Set(locations).size, 50);
  // Another connection reads every one of them, and the stored response that names it.
  const stored = observer
    .prepare('SELECT response_location FROM idempotency_keys WHERE key LIKE ? ORDER BY rowid')
    .pluck()
    .all('k%');
  assert.deepEqual(stored, locations);
  for (const location of locations) {
    assert.equal(observer.prepare('SELECT count(*) FROM pets WHERE id = ?').pluck().get(location.split('/').pop()), 1);
  }
  // 50 separate commits would each have appended a frame for the pets, the keys and the counts.
  const [checkpoint] = observer.pragma('wal_checkpoint(PASSIVE)') as { log: number }[];
  assert.ok(checkpoint!.log < 40, `${checkpoint!.log} WAL frames for 50 idempotent creates`);
});

test('one key used twice in one turn creates once: the second finds the first claim and replays it', async (t) => {
  const { store, apiKeyId, count } = await storeWithKey(t);
  const [first, second] = await Promise.all([
    store.createPetOnce(pet, claim(apiKeyId, 'k'), respond),
    store.createPetOnce(pet, claim(apiKeyId, 'k'), respond),
  ]);
  assert.equal(first.kind, 'created');
  assert.equal(second.kind, 'replayed');
  assert.equal(count('pets'), 1);
});

test('an idempotent create answered 201 survives kill -9, and so does its stored response: the retry replays it', async (t) => {
  const env = childEnv(t);
  await migrateDatabase(env);
  const { key } = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout) as {
    key: string;
  };
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const post = (url: string, name: string) =>
    fetch(`${url}/v1/pets`, {
      method: 'POST',
      headers: { ...headers, 'idempotency-key': name },
      body: `{"name":"${name}","categoryId":7}`,
    });

  const server = await startServer(t, env);
  const acknowledged = new Map<string, string>();
  let killed = false;
  // Killed a random moment after the first 201, whatever is in flight then; 10 s at the latest.
  let timer = setTimeout(() => ((killed = true), server.child.kill('SIGKILL')), 10_000);
  const worker = async (w: number) => {
    for (let i = 0; !killed && i < 10_000; i++) {
      const name = `w${w}-${i}`;
      let text: string;
      try {
        const response = await post(server.url, name);
        text = await response.text();
        assert.equal(response.status, 201, text);
      } catch (error) {
        if (killed) return;
        throw error;
      }
      if (acknowledged.size === 0) {
        clearTimeout(timer);
        timer = setTimeout(() => ((killed = true), server.child.kill('SIGKILL')), 50 + Math.floor(Math.random() * 300));
      }
      acknowledged.set(name, text);
    }
  };
  await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
  clearTimeout(timer);
  assert.equal((await server.exited).signal, 'SIGKILL');
  assert.ok(acknowledged.size > 0, 'no create was acknowledged before the kill');

  const again = await startServer(t, env);
  for (const [name, text] of acknowledged) {
    const replay = await post(again.url, name);
    assert.equal(replay.status, 201);
    assert.equal(replay.headers.get('idempotent-replayed'), 'true', `${name} was created again`);
    assert.equal(await replay.text(), text);
  }
});
