import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { batchedCounters, type WriteHits } from '../src/http/rate-counters.js';
import { openPostgresStore } from '../src/store/postgres.js';

const T0 = Date.UTC(2026, 10, 22);

/** What the rate_counters table does, for counters written by several instances: adds, returns the totals. */
function sharedTable() {
  const rows = new Map<string, number>();
  const writes: { subjects: string[]; hits: number[] }[] = [];
  const write: WriteHits = async (windowStart, subjects, hits) => {
    writes.push({ subjects, hits });
    return new Map(
      subjects.map((subject, i) => {
        const key = `${windowStart}|${subject}`;
        rows.set(key, (rows.get(key) ?? 0) + hits[i]!);
        return [subject, rows.get(key)!];
      }),
    );
  };
  return { rows, writes, write };
}

test('counts each hit at once and writes one batch per interval at most, whatever the number of hits', async () => {
  const table = sharedTable();
  const counters = batchedCounters(table.write, 50);
  const started = performance.now();
  const expected = [0, 0, 0];
  let counted = 0;
  // Rounds, not a span of time: a busy machine stretches each sleep, never the hits' number.
  for (let round = 0; round < 12; round++) {
    for (let i = 0; i < 99; i++, counted++) assert.equal(counters.countHit(`key:${i % 3}`, T0), ++expected[i % 3]!);
    await sleep(25);
  }
  await counters.close();
  const seconds = (performance.now() - started) / 1000;
  assert.ok(
    table.writes.length <= Math.ceil((seconds * 1000) / 50) + 1,
    `${table.writes.length} writes for ${counted} hits`,
  );
  assert.deepEqual(table.writes[0]!.subjects, ['key:0', 'key:1', 'key:2'], 'one row per subject, in order');
  const total = [...table.rows.values()].reduce((sum, n) => sum + n, 0);
  assert.equal(total, counted, 'every hit written once');
});

test('an instance counts the hits another wrote, from its own next write on', async () => {
  const table = sharedTable();
  const [a, b] = [batchedCounters(table.write, 10_000), batchedCounters(table.write, 10_000)];
  for (let i = 1; i <= 5; i++) assert.equal(a.countHit('key:7', T0), i);
  await a.flush();
  assert.equal(b.countHit('key:7', T0), 1, 'b has not written yet: its own hits only');
  await b.flush();
  assert.equal(b.countHit('key:7', T0), 7, "a's five, b's written one and this one");
  assert.equal(a.countHit('key:7', T0), 6, 'a has not read the totals since its write');
  await a.flush();
  assert.equal(a.countHit('key:7', T0), 8);
  assert.equal(a.countHit('key:7', T0 + 60_000), 1, 'a new window starts from zero');
  await Promise.all([a.close(), b.close()]);
});

test('while the store cannot be written, counting goes on and the hits are sent with the next batch', async () => {
  const table = sharedTable();
  let down = true;
  const counters = batchedCounters(async (...args) => {
    if (down) throw new Error('The database cannot be reached');
    return table.write(...args);
  }, 10_000);
  assert.equal(counters.countHit('key:1', T0), 1);
  assert.equal(counters.countHit('key:1', T0), 2);
  await counters.flush();
  assert.equal(counters.countHit('key:1', T0), 3, 'the unwritten hits still count');
  down = false;
  await counters.flush();
  assert.equal(table.rows.get(`${T0}|key:1`), 3, 'written once it could be');
  assert.equal(counters.countHit('key:1', T0), 4);
  await counters.close();
});

test('PostgreSQL that refuses connections: the rate-limit count goes on in memory, and closing does not hang', async () => {
  const store = openPostgresStore('postgres://postgres@127.0.0.1:1/test', { timeoutMs: 500 });
  const counters = batchedCounters((...batch) => store.addHits(...batch), 20);
  for (let i = 1; i <= 3; i++) assert.equal(counters.countHit('key:1', T0), i);
  await sleep(100);
  assert.equal(counters.countHit('key:1', T0), 4);
  await counters.close();
  await store.close();
});
