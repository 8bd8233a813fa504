import assert from 'node:assert/strict';
import { after, describe, test, type TestContext } from 'node:test';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { PET_COUNTS_MAX_AGE_MS } from '../src/store/store.js';
import { manualClock } from './helpers.js';
import { storeKinds } from './stores.js';

const SEEDED = 1_000_000;

// One statement each, so the million rows cost seconds, not minutes; status by id modulo 3.
const seed = {
  SQLite:
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${SEEDED}) ` +
    "INSERT INTO pets (name, category_id, status) SELECT 'Rex', i, " +
    "CASE i % 3 WHEN 0 THEN 'available' WHEN 1 THEN 'pending' ELSE 'sold' END FROM n",
  PostgreSQL:
    "INSERT INTO pets (name, category_id, status) SELECT 'Rex', i, " +
    "(ARRAY['available', 'pending', 'sold'])[i % 3 + 1] FROM generate_series(1, " +
    `${SEEDED}) AS i; ANALYZE pets`,
};

const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

function petsGauge(text: string): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const [, status, value] of text.matchAll(/^petstore_pets\{status="([a-z]+)"\} ([0-9]+)$/gm)) {
    counts[status!] = Number(value);
  }
  return counts;
}

async function seededApp(t: TestContext, kind: (typeof storeKinds)[number], { seeded = true } = {}) {
  const clock = manualClock();
  const database = await kind.createDatabase(t);
  const store = database.open({ clock });
  await store.migrate();
  if (seeded) await database.execute(seed[kind.name]);
  const app = await buildApp({ config: loadConfig({}), store, clock, logger: false });
  t.after(() => app.close());
  const { key } = await issueKey(store, 'test');
  const base = await app.listen({ host: '127.0.0.1', port: 0 });
  return { base, clock, headers: { authorization: `Bearer ${key}` } };
}

/**
 * The median time of `/healthz` answers while `/metrics` is scraped three at a time. Both loops
 * run until there have been 30 scrapes and 20 health checks, so every health check is timed
 * while scrapes run, however fast either is on this machine.
 */
async function healthzUnderScrapes({ base, headers }: Awaited<ReturnType<typeof seededApp>>) {
  let scrapes = 0;
  const waits: number[] = [];
  const done = () => scrapes >= 30 && waits.length >= 20;
  const scrapers = Array.from({ length: 3 }, async () => {
    while (!done()) {
      const response = await fetch(`${base}/metrics`, { headers });
      assert.equal(response.status, 200);
      await response.text();
      scrapes += 1;
    }
  });
  // Bounded in count: a scrape that never ends fails the test at its timeout, not here.
  for (let i = 0; i < 10_000 && !done(); i++) {
    const started = performance.now();
    assert.equal((await fetch(`${base}/healthz`)).status, 200);
    waits.push(performance.now() - started);
  }
  await Promise.all(scrapers);
  assert.ok(done(), `${scrapes} scrapes ran beside ${waits.length} health checks`);
  return median(waits);
}

for (const kind of storeKinds) {
  describe(`/metrics on a store of a million animals (${kind.name})`, { skip: kind.skip }, () => {
    // One database of a million animals for both tests (seeding it is most of their work),
    // closed and removed after the second; the first only reads it.
    const steps: (() => unknown)[] = [];
    const suite = { after: (step: () => unknown) => void steps.push(step) } as unknown as TestContext;
    after(async () => {
      for (const step of steps.reverse()) await step();
    });
    let shared: ReturnType<typeof seededApp> | undefined;
    const millionApp = () => (shared ??= seededApp(suite, kind));

    test('/healthz answers as promptly while a million animals are scraped as while none are', async (t) => {
      const seeded = await millionApp();
      // The first count may scan (PostgreSQL caches it); every scrape after it must not.
      const first = await fetch(`${seeded.base}/metrics`, { headers: seeded.headers });
      assert.deepEqual(petsGauge(await first.text()), { available: 333_333, pending: 333_334, sold: 333_333 });
      // The same scrapes of an empty store, at the same moment on the same machine, are the
      // yardstick: no figure of this machine's speed is assumed. A GROUP BY over a million rows
      // blocks SQLite's process about 60 ms per scrape, and the median was 133 ms, against a
      // few ms beside an empty store, when each scrape ran one.
      const none = await healthzUnderScrapes(await seededApp(t, kind, { seeded: false }));
      const million = await healthzUnderScrapes(seeded);
      assert.ok(
        million < 2 * none + 20,
        `/healthz median ${million.toFixed(1)} ms under scrapes of a million animals, ${none.toFixed(1)} ms of none`,
      );
    });

    test("the counts are the contract's numbers after creates, at most 5 s later", async () => {
      const { base, clock, headers } = await millionApp();
      const scrape = async () => petsGauge(await (await fetch(`${base}/metrics`, { headers })).text());
      assert.deepEqual(await scrape(), { available: 333_333, pending: 333_334, sold: 333_333 });
      for (const status of ['sold', 'pending', 'sold']) {
        const response = await fetch(`${base}/v1/pets`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: JSON.stringify({ name: 'Rex', categoryId: 1, status }),
        });
        assert.equal(response.status, 201);
      }
      clock.set(clock.now() + PET_COUNTS_MAX_AGE_MS);
      assert.deepEqual(await scrape(), { available: 333_333, pending: 333_335, sold: 333_335 });
    });
  });
}

test('SQLite: migration 004 counts the animals stored before it, then every change by any writer', async (t) => {
  const sqlite = storeKinds.find((kind) => kind.name === 'SQLite')!;
  const database = await sqlite.createDatabase(t);
  await database.open().migrate();
  // The file as it was before 004, with animals in it.
  await database.execute(
    'DROP TRIGGER pets_counted_insert; DROP TRIGGER pets_counted_delete; DROP TRIGGER pets_counted_update; ' +
      'DROP TABLE pet_counts; DELETE FROM schema_migrations WHERE version = 4; ' +
      "INSERT INTO pets (name, category_id, status) VALUES ('a', 1, 'sold'), ('b', 1, 'sold'), ('c', 1, 'pending')",
  );
  const store = database.open();
  assert.deepEqual(await store.migrate(), ['004_pet_counts']);
  assert.deepEqual(await store.countPetsByStatus(), { available: 0, pending: 1, sold: 2 });
  await database.execute("UPDATE pets SET status = 'available' WHERE name = 'a'; DELETE FROM pets WHERE name = 'c'");
  await store.createPet({ name: 'd', categoryId: 1n, status: 'pending' });
  assert.deepEqual(await store.countPetsByStatus(), { available: 1, pending: 1, sold: 1 });
});
