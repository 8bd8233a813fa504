import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { describe, test, type TestContext } from 'node:test';
import { keyMemory } from '../src/keys/memory.js';
import {
  PET_COUNTS_MAX_AGE_MS,
  type IdempotencyClaim,
  type NewKeyRecord,
  type Store,
  type StoredResponse,
} from '../src/store/store.js';
import { manualClock } from './helpers.js';
import { migratedStore, storeKinds, type TestDatabase } from './stores.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

const DAY = 24 * 60 * 60 * 1000;
const T0 = Date.UTC(2026, 10, 22);

function claim(key: string, body = 'a', now = T0, apiKeyId = 1): IdempotencyClaim {
  return { apiKeyId, key, fingerprint: Buffer.alloc(32, body), now, expiresAt: now + DAY };
}

const respond = (pet: { id: bigint; name: string }): StoredResponse => ({
  status: 201,
  body: `{"id":${pet.id},"name":${JSON.stringify(pet.name)}}`,
  location: `/v1/pets/${pet.id}`,
});

function newKey(name = 'test', createdAt = new Date('2026-11-22T10:00:00.123Z')): NewKeyRecord {
  return { name, hint: 'psk_abcd', hash: randomBytes(32), createdAt };
}

/**
 * What `list` answers once it holds at least `count` items, or after 10 s: on PostgreSQL an event
 * is listed once every older transaction on the server has ended (docs/events.md#ordering), and
 * other clients of the test server may hold one open for a moment.
 */
async function eventually<T>(list: () => Promise<T[]>, count: number): Promise<T[]> {
  for (const deadline = Date.now() + 10_000; ; await new Promise((resolve) => setTimeout(resolve, 20))) {
    const items = await list();
    if (items.length >= count || Date.now() > deadline) return items;
  }
}

for (const kind of storeKinds) {
  describe(`the Store contract on ${kind.name}`, () => {
    // Skipped test by test, so the run's summary counts them.
    const it = (name: string, fn: (t: TestContext) => Promise<void>) => test(name, { skip: kind.skip }, fn);

    const migrated = (t: TestContext) => migratedStore(kind, t);

    // The same numbered steps on both stores; PostgreSQL's 004 is a no-op (it caches a count).
    const steps = [
      '001_pets_and_keys',
      '002_idempotency_keys',
      '003_key_scopes_and_expiry',
      '004_pet_counts',
      '005_key_deprecated_use',
      '006_events',
      '007_webhooks',
      '008_webhook_due_order',
      '009_webhook_backoff_and_attempts',
    ];

    it('migrate applies every step once; a second migrate is a no-op that keeps the data', async (t) => {
      const database = await kind.createDatabase(t);
      const store = database.open();
      const heard: string[] = [];
      assert.deepEqual(
        await store.migrate((name, ms) => {
          assert.ok(ms >= 0);
          heard.push(name);
        }),
        steps,
      );
      assert.deepEqual(heard, steps);
      const pet = await store.createPet({ name: 'Rex', categoryId: 1n, status: 'available' });
      assert.deepEqual(await store.migrate(), []);
      assert.deepEqual(await store.getPet(pet.id), pet);
    });

    it('two instances migrating the same database at the same moment apply each step once', async (t) => {
      const database = await kind.createDatabase(t);
      const stores = [database.open(), database.open(), database.open()];
      const applied = await Promise.all(stores.map((store) => store.migrate()));
      assert.deepEqual(applied.flat(), steps);
      for (const store of stores) await store.createPet({ name: 'Rex', categoryId: 1n, status: 'available' });
      assert.equal((await stores[0]!.listPets({ limit: 10 })).length, 3);
    });

    it('ping resolves when the database answers', async (t) => {
      const [store] = await migrated(t);
      await store.ping();
    });

    it('createPet returns the animal with a positive bigint id; getPet returns it', async (t) => {
      const [store] = await migrated(t);
      const pet = await store.createPet({ name: 'Zoë 🐈', categoryId: 7n, status: 'pending' });
      assert.equal(typeof pet.id, 'bigint');
      assert.ok(pet.id > 0n);
      assert.deepEqual(pet, { id: pet.id, name: 'Zoë 🐈', categoryId: 7n, status: 'pending' });
      assert.deepEqual(await store.getPet(pet.id), pet);
      assert.equal(await store.getPet(pet.id + 1n), undefined);
      assert.equal(await store.getPet(INT64_MAX), undefined);
    });

    it('categoryId round-trips exactly across the whole int64 range', async (t) => {
      const [store] = await migrated(t);
      const values = [INT64_MIN, INT64_MIN + 1n, -(2n ** 53n) - 1n, -1n, 0n, 2n ** 53n + 1n, INT64_MAX - 1n, INT64_MAX];
      const created = [];
      for (const categoryId of values) created.push(await store.createPet({ name: 'n', categoryId, status: 'sold' }));
      for (const [i, pet] of created.entries()) {
        assert.equal(pet.categoryId, values[i]);
        assert.equal((await store.getPet(pet.id))!.categoryId, values[i]);
      }
      const listed = await store.listPets({ limit: 100 });
      assert.deepEqual(
        listed.map((pet) => pet.categoryId),
        values,
      );
      assert.ok(listed.every((pet) => typeof pet.categoryId === 'bigint' && typeof pet.id === 'bigint'));
    });

    it('ids increase in creation order and are never reused, even after the newest row is gone', async (t) => {
      const [store, database] = await migrated(t);
      const first = await store.createPet({ name: 'a', categoryId: 1n, status: 'available' });
      const second = await store.createPet({ name: 'b', categoryId: 1n, status: 'available' });
      assert.ok(second.id > first.id);
      await database.execute(`DELETE FROM pets WHERE id = ${second.id}`);
      const third = await store.createPet({ name: 'c', categoryId: 1n, status: 'available' });
      assert.ok(third.id > second.id, `id ${third.id} reuses or precedes ${second.id}`);
    });

    it('listPets returns ascending ids, at most limit, after afterId, filtered by status', async (t) => {
      const [store] = await migrated(t);
      const statuses = ['available', 'sold', 'available', 'pending', 'available', 'sold'] as const;
      const pets = [];
      for (const [i, status] of statuses.entries()) {
        pets.push(await store.createPet({ name: `pet ${i}`, categoryId: BigInt(i), status }));
      }
      assert.deepEqual(await store.listPets({ limit: 100 }), pets);
      assert.deepEqual(await store.listPets({ limit: 2 }), pets.slice(0, 2));
      assert.deepEqual(await store.listPets({ limit: 2, afterId: pets[1]!.id }), pets.slice(2, 4));
      assert.deepEqual(await store.listPets({ limit: 100, afterId: pets[5]!.id }), []);
      const available = pets.filter((pet) => pet.status === 'available');
      assert.deepEqual(await store.listPets({ limit: 100, status: 'available' }), available);
      assert.deepEqual(await store.listPets({ limit: 1, status: 'available', afterId: available[0]!.id }), [
        available[1],
      ]);
      assert.deepEqual(await store.listPets({ limit: 100, status: 'pending' }), [pets[3]]);
      assert.deepEqual(await store.listPets({ limit: 100, afterId: 0n }), pets);
    });

    it('countPetsByStatus counts every status, 0 for a status no animal has', async (t) => {
      const clock = manualClock();
      const database = await kind.createDatabase(t);
      const store = database.open({ clock });
      await store.migrate();
      assert.deepEqual(await store.countPetsByStatus(), { available: 0, pending: 0, sold: 0 });
      const statuses = ['sold', 'available', 'sold', 'sold', 'available'] as const;
      for (const status of statuses) await store.createPet({ name: 'n', categoryId: 1n, status });
      clock.set(clock.now() + PET_COUNTS_MAX_AGE_MS);
      assert.deepEqual(await store.countPetsByStatus(), { available: 2, pending: 0, sold: 3 });
    });

    it('countPetsByStatus is at most PET_COUNTS_MAX_AGE_MS old, counting every writer', async (t) => {
      const clock = manualClock();
      const database = await kind.createDatabase(t);
      const [store, other] = [database.open({ clock }), database.open({ clock })];
      await store.migrate();
      await other.migrate();
      await store.createPet({ name: 'n', categoryId: 1n, status: 'pending' });
      const before = await store.countPetsByStatus();
      assert.deepEqual(before, { available: 0, pending: 1, sold: 0 });
      // Another instance, an idempotent create, a create refused by the database, and SQL
      // written by hand: all counted, the refused one not.
      await other.createPet({ name: 'n', categoryId: 1n, status: 'sold' });
      const { id } = await other.createKey(newKey());
      const pet = { name: 'n', categoryId: 2n, status: 'sold' } as const;
      const outcome = await other.createPetOnce(pet, claim('k', 'a', T0, id), respond);
      assert.equal(outcome.kind, 'created');
      await assert.rejects(store.createPet({ name: 'n', categoryId: 1n, status: 'lost' as 'sold' }));
      await database.execute("INSERT INTO pets (name, category_id, status) VALUES ('n', 3, 'available')");
      const exact = { available: 1, pending: 1, sold: 2 };
      clock.set(clock.now() + PET_COUNTS_MAX_AGE_MS - 1);
      // SQLite's counts are kept by the database as rows change: exact at once.
      if (kind.name === 'SQLite') assert.deepEqual(await store.countPetsByStatus(), exact);
      else assert.deepEqual(await store.countPetsByStatus(), before);
      clock.set(clock.now() + 1);
      assert.deepEqual(await store.countPetsByStatus(), exact);
      assert.deepEqual(await other.countPetsByStatus(), exact);
    });

    it('keyset paging visits every animal exactly once, in order, while more are added', async (t) => {
      const [store] = await migrated(t);
      const before = [];
      for (let i = 0; i < 7; i++) before.push(await store.createPet({ name: `p${i}`, categoryId: 1n, status: 'sold' }));
      const seen = [];
      let afterId: bigint | undefined;
      for (let page = 0; page < 20; page++) {
        const pets = await store.listPets({ limit: 3, afterId, status: 'sold' });
        seen.push(...pets);
        if (pets.length < 3) break;
        afterId = pets.at(-1)!.id;
        await store.createPet({ name: 'late', categoryId: 2n, status: 'sold' });
      }
      assert.deepEqual(seen.slice(0, before.length), before);
      assert.equal(new Set(seen.map((pet) => pet.id)).size, seen.length);
    });

    it('50 concurrent createPet calls all get distinct ids, and all are kept', async (t) => {
      const [store] = await migrated(t);
      const created = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          store.createPet({ name: `pet ${i}`, categoryId: BigInt(i), status: 'available' }),
        ),
      );
      assert.equal(new Set(created.map((pet) => pet.id)).size, 50);
      const listed = await store.listPets({ limit: 100 });
      assert.equal(listed.length, 50);
      assert.deepEqual(
        listed.map((pet) => pet.id),
        created.map((pet) => pet.id).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
      );
    });

    it('createKey stores a key that findActiveKey finds by hash and listKeys lists', async (t) => {
      const [store] = await migrated(t);
      const input = newKey('ci');
      const record = await store.createKey(input);
      assert.equal(typeof record.id, 'number');
      assert.deepEqual(record, {
        id: record.id,
        name: 'ci',
        hint: 'psk_abcd',
        scopes: ['pets:read', 'pets:write', 'metrics:read'],
        createdAt: input.createdAt,
        expiresAt: null,
        revokedAt: null,
        lastUsedAt: null,
        lastDeprecatedUseAt: null,
        replacedBy: null,
      });
      const found = await store.findActiveKey(input.hash);
      assert.deepEqual(found, {
        id: record.id,
        hash: input.hash,
        scopes: ['pets:read', 'pets:write', 'metrics:read'],
        expiresAt: null,
      });
      assert.equal(await store.findActiveKey(randomBytes(32)), undefined);
      const other = await store.createKey(newKey('ops'));
      assert.deepEqual(await store.listKeys(), [record, other]);
    });

    it('writeKeyUses and writeDeprecatedUses write each in its own column, never moving a use back', async (t) => {
      const [store] = await migrated(t);
      const used = await store.createKey(newKey('used'));
      const old = await store.createKey(newKey('old client'));
      await store.writeKeyUses([
        { id: used.id, at: T0 + 5000 },
        { id: old.id, at: T0 + 1000 },
      ]);
      await store.writeKeyUses([{ id: used.id, at: T0 }]);
      await store.writeDeprecatedUses([{ id: old.id, at: T0 + 2000 }]);
      assert.deepEqual(
        (await store.listKeys()).map((key) => [
          key.name,
          key.lastUsedAt?.getTime() ?? null,
          key.lastDeprecatedUseAt?.getTime() ?? null,
        ]),
        [
          ['used', T0 + 5000, null],
          ['old client', T0 + 1000, T0 + 2000],
        ],
      );
    });

    it('the key memory, closed before the store, writes the uses noted in it, each in its own column', async (t) => {
      const database = await kind.createDatabase(t);
      const first = database.open();
      await first.migrate();
      const memory = keyMemory(first, { keyUseFlushMs: 60_000 });
      const used = await first.createKey(newKey('used'));
      const old = await first.createKey(newKey('old client'));
      memory.noteKeyUse(used.id, T0);
      memory.noteKeyUse(old.id, T0 + 1000);
      memory.noteDeprecatedUse(old.id, T0 + 2000);
      await memory.close();
      await first.close();
      const second = database.open();
      await second.migrate();
      const keys = await second.listKeys();
      assert.deepEqual(
        keys.map((key) => [key.name, key.lastUsedAt?.getTime() ?? null, key.lastDeprecatedUseAt?.getTime() ?? null]),
        [
          ['used', T0, null],
          ['old client', T0 + 1000, T0 + 2000],
        ],
      );
    });

    it('revokeKey refuses the key from then on; revoking it again, or an unknown id, is false', async (t) => {
      const [store] = await migrated(t);
      const input = newKey();
      const record = await store.createKey(input);
      const at = new Date('2026-11-23T00:00:00.456Z');
      assert.equal(await store.revokeKey(record.id, at), true);
      assert.equal(await store.findActiveKey(input.hash), undefined);
      assert.equal(await store.revokeKey(record.id, new Date()), false);
      assert.equal(await store.revokeKey(record.id + 1000, new Date()), false);
      assert.deepEqual(await store.listKeys(), [{ ...record, revokedAt: at }]);
    });

    it('onKeysChanged hears each revocation and roll made through the store, not a new key', async (t) => {
      const [store] = await migrated(t);
      let heard = 0;
      store.onKeysChanged(() => void heard++);
      const record = await store.createKey(newKey('rolled'));
      assert.equal(heard, 0, 'a new key changes nothing already kept');
      const roll = await store.rollKey({
        id: record.id,
        successor: { hint: 'psk_next', hash: randomBytes(32), createdAt: new Date() },
        oldExpiresAt: new Date(Date.now() + 60_000),
        at: new Date(),
      });
      assert.equal(roll.kind, 'rolled');
      assert.equal(heard, 1);
      assert.equal(await store.revokeKey(record.id, new Date()), true);
      assert.equal(heard, 2);
    });

    it('createFirstKey creates a key only when there is none at all', async (t) => {
      const [store] = await migrated(t);
      const first = await store.createFirstKey(newKey('first'));
      assert.equal(first?.name, 'first');
      assert.equal(await store.createFirstKey(newKey('second')), undefined);
      assert.equal((await store.listKeys()).length, 1);

      const [other] = await migrated(t);
      await other.createKey(newKey('made by hand'));
      assert.equal(await other.createFirstKey(newKey('first')), undefined);
    });

    it('10 concurrent createFirstKey calls on two instances create exactly one key', async (t) => {
      const database = await kind.createDatabase(t);
      const stores = [database.open(), database.open()];
      await Promise.all(stores.map((store) => store.migrate()));
      const results = await Promise.all(
        Array.from({ length: 10 }, (_, i) => stores[i % 2]!.createFirstKey(newKey(`first ${i}`))),
      );
      const created = results.filter((record) => record !== undefined);
      assert.equal(created.length, 1);
      assert.deepEqual(await stores[0]!.listKeys(), created);
    });

    async function withKey(t: TestContext): Promise<[Store, TestDatabase, number]> {
      const [store, database] = await migrated(t);
      const key = await store.createKey(newKey());
      return [store, database, key.id];
    }

    it('createPetOnce creates once, then replays the stored response for the same body', async (t) => {
      const [store, , apiKeyId] = await withKey(t);
      const pet = { name: 'Rex', categoryId: 7n, status: 'available' } as const;
      const first = await store.createPetOnce(pet, claim('k', 'a', T0, apiKeyId), respond);
      assert.equal(first.kind, 'created');
      const again = await store.createPetOnce(pet, claim('k', 'a', T0 + DAY - 1, apiKeyId), () => {
        throw new Error('a replay makes no new response');
      });
      assert.deepEqual(again, { kind: 'replayed', response: (first as { response: StoredResponse }).response });
      assert.equal((await store.listPets({ limit: 10 })).length, 1);
    });

    it('createPetOnce refuses the same key with another body, and scopes keys to the API key', async (t) => {
      const [store, , apiKeyId] = await withKey(t);
      const other = (await store.createKey(newKey('other'))).id;
      const pet = { name: 'Rex', categoryId: 7n, status: 'available' } as const;
      await store.createPetOnce(pet, claim('k', 'a', T0, apiKeyId), respond);
      assert.deepEqual(await store.createPetOnce(pet, claim('k', 'b', T0, apiKeyId), respond), { kind: 'mismatch' });
      assert.equal((await store.createPetOnce(pet, claim('k', 'b', T0, other), respond)).kind, 'created');
      assert.equal((await store.listPets({ limit: 10 })).length, 2);
    });

    it('an expired key is free again, and later creates delete expired keys', async (t) => {
      const [store, database, apiKeyId] = await withKey(t);
      const pet = { name: 'Rex', categoryId: 7n, status: 'available' } as const;
      await store.createPetOnce(pet, claim('old', 'a', T0, apiKeyId), respond);
      await store.createPetOnce(pet, claim('k', 'a', T0, apiKeyId), respond);
      assert.equal((await store.createPetOnce(pet, claim('k', 'b', T0 + DAY, apiKeyId), respond)).kind, 'created');
      assert.equal(await database.scalar("SELECT count(*) FROM idempotency_keys WHERE key = 'old'"), 0);
      assert.equal(await database.scalar('SELECT count(*) FROM idempotency_keys'), 1);
      assert.equal((await store.listPets({ limit: 10 })).length, 3);
    });

    it('20 concurrent createPetOnce calls with one key on two instances create exactly one animal', async (t) => {
      const database = await kind.createDatabase(t);
      const stores = [database.open(), database.open()];
      await Promise.all(stores.map((store) => store.migrate()));
      const apiKeyId = (await stores[0]!.createKey(newKey())).id;
      const pet = { name: 'Rex', categoryId: 7n, status: 'available' } as const;
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, (_, i) => stores[i % 2]!.createPetOnce(pet, claim('k', 'a', T0, apiKeyId), respond)),
      );
      assert.equal(outcomes.filter((outcome) => outcome.kind === 'created').length, 1);
      assert.ok(outcomes.every((outcome) => ['created', 'replayed', 'in_flight'].includes(outcome.kind)));
      assert.equal((await stores[1]!.listPets({ limit: 10 })).length, 1);
    });

    it('addHits adds per subject and window and answers the totals; PostgreSQL instances share them', async (t) => {
      const database = await kind.createDatabase(t);
      const [a, b] = [database.open(), database.open()];
      await Promise.all([a.migrate(), b.migrate()]);
      assert.deepEqual(
        await a.addHits(T0, ['key:1', 'key:2'], [2, 1]),
        new Map([
          ['key:1', 2],
          ['key:2', 1],
        ]),
      );
      // PostgreSQL: a's two, then b's one. SQLite: one process each, so b's own only.
      assert.deepEqual(await b.addHits(T0, ['key:1'], [1]), new Map([['key:1', kind.name === 'PostgreSQL' ? 3 : 1]]));
      assert.deepEqual(
        await a.addHits(T0 + 60_000, ['key:1'], [1]),
        new Map([['key:1', 1]]),
        'a new window starts from 0',
      );
    });

    it('every create writes one event with the animal as JSON; listEvents pages by position', async (t) => {
      const database = await kind.createDatabase(t);
      const clock = manualClock(T0);
      const store = database.open({ clock });
      await store.migrate();
      await store.createKey(newKey());
      const plain = await store.createPet({ name: 'A "quoted" name', categoryId: INT64_MAX, status: 'sold' });
      const once = await store.createPetOnce(
        { name: 'B', categoryId: INT64_MIN, status: 'pending' },
        claim('k'),
        respond,
      );
      assert.equal(once.kind, 'created');
      assert.equal(
        (await store.createPetOnce({ name: 'B', categoryId: 1n, status: 'pending' }, claim('k'), respond)).kind,
        'replayed',
      );
      const events = await eventually(() => store.listEvents({ limit: 10 }), 2);
      assert.equal(events.length, 2);
      assert.deepEqual(
        events[0]!.data,
        `{"id":${plain.id},"name":"A \\"quoted\\" name","categoryId":${INT64_MAX},"status":"sold"}`,
      );
      assert.match(
        events[1]!.data,
        new RegExp(`^\\{"id":\\d+,"name":"B","categoryId":${INT64_MIN},"status":"pending"\\}$`),
      );
      for (const event of events) {
        assert.equal(event.type, 'pet.created');
        assert.equal(event.createdAt.getTime(), T0);
      }
      const [first, second] = events.map((event) => event.position);
      assert.ok(first!.tx < second!.tx || (first!.tx === second!.tx && first!.seq < second!.seq));
      assert.deepEqual(
        (await store.listEvents({ after: first, limit: 10 })).map((event) => event.position),
        [second],
      );
      assert.deepEqual(await store.listEvents({ after: second, limit: 10 }), []);
      assert.deepEqual(
        (await store.listEvents({ limit: 1 })).map((event) => event.position),
        [first],
      );
    });

    it('pruneEvents deletes at most limit events, oldest first, only those created before the instant', async (t) => {
      const database = await kind.createDatabase(t);
      const clock = manualClock(T0);
      const store = database.open({ clock });
      await store.migrate();
      for (let i = 0; i < 5; i++) await store.createPet({ name: `Old ${i}`, categoryId: 1n, status: 'sold' });
      clock.set(T0 + DAY);
      await store.createPet({ name: 'New', categoryId: 1n, status: 'sold' });
      assert.equal((await eventually(() => store.listEvents({ limit: 10 }), 6)).length, 6);
      assert.equal(await store.pruneEvents(new Date(T0 + 1), 2), 2);
      assert.equal((await store.listEvents({ limit: 10 })).length, 4);
      assert.equal(await store.pruneEvents(new Date(T0 + 1), 100), 3);
      assert.equal(await store.pruneEvents(new Date(T0 + 1), 100), 0);
      const left = await store.listEvents({ limit: 10 });
      assert.deepEqual(
        left.map((event) => JSON.parse(event.data).name),
        ['New'],
      );
      // The animals stay: only their announcements expire.
      assert.equal((await store.listPets({ limit: 10 })).length, 6);
    });
  });
}
