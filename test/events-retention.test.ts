import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { loadConfig } from '../src/config.js';
import { startEventRetention } from '../src/events/retention.js';
import { issueKey } from '../src/keys/issue.js';
import type { Store } from '../src/store/store.js';
import { manualClock, startApp } from './helpers.js';
import { storeKinds } from './stores.js';

const DAY = 24 * 60 * 60 * 1000;
const T0 = Date.UTC(2026, 10, 22);

test('PETSTORE_EVENT_RETENTION is 30 days by default, a duration when set, and refused otherwise', () => {
  assert.equal(loadConfig({}).eventRetentionMs, 30 * DAY);
  assert.equal(
    loadConfig({ PETSTORE_EVENT_RETENTION: '12h', PETSTORE_WEBHOOK_GIVE_UP: '12h' }).eventRetentionMs,
    12 * 60 * 60 * 1000,
  );
  assert.equal(loadConfig({ PETSTORE_EVENT_RETENTION: '90d' }).eventRetentionMs, 90 * DAY);
  for (const raw of ['', '30', '0d', '30 d', '-1d', '1w', '30s', '3651d', 'off']) {
    assert.throws(() => loadConfig({ PETSTORE_EVENT_RETENTION: raw }), /^Error: PETSTORE_EVENT_RETENTION must be/, raw);
  }
});

test('a retention shorter than PETSTORE_WEBHOOK_GIVE_UP is refused, naming both settings', () => {
  const refused = [
    [{ PETSTORE_EVENT_RETENTION: '1h' }, '(3d)', '"1h"'],
    [{ PETSTORE_EVENT_RETENTION: '2d', PETSTORE_WEBHOOK_GIVE_UP: '49h' }, '(49h)', '"2d"'],
    [{ PETSTORE_WEBHOOK_GIVE_UP: '30d', PETSTORE_EVENT_RETENTION: '29d' }, '(30d)', '"29d"'],
  ] as const;
  for (const [env, giveUp, retention] of refused) {
    assert.throws(
      () => loadConfig(env),
      (error: Error) =>
        error.message.startsWith(`PETSTORE_EVENT_RETENTION must be at least PETSTORE_WEBHOOK_GIVE_UP ${giveUp}`) &&
        error.message.endsWith(`(got ${retention})`),
      JSON.stringify(env),
    );
  }
  // Equal is enough: an event is kept until it is given up.
  assert.equal(
    loadConfig({ PETSTORE_EVENT_RETENTION: '2d', PETSTORE_WEBHOOK_GIVE_UP: '48h' }).eventRetentionMs,
    2 * DAY,
  );
});

for (const kind of storeKinds) {
  test(
    `${kind.name}: events older than the retention leave the feed in the background; newer ones and the pets stay`,
    { skip: kind.skip },
    async (t: TestContext) => {
      const database = await kind.createDatabase(t);
      const clock = manualClock(T0);
      const store = database.open({ clock });
      await store.migrate();
      const app = await startApp(t, { store, clock, env: { PETSTORE_EVENT_RETENTION: '30d' }, eventPruneEveryMs: 10 });
      const { key } = await issueKey(store, 'reader', new Date(T0), { scopes: ['events:read', 'pets:read'] });
      const read = (url: string) => app.app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key}` } });
      const create = (name: string) => app.call({ method: 'POST', url: '/v1/pets', payload: { name, categoryId: 1 } });
      for (const name of ['Old 1', 'Old 2', 'Old 3']) assert.equal((await create(name)).statusCode, 201);
      clock.set(T0 + 29 * DAY);
      for (const name of ['New 1', 'New 2']) assert.equal((await create(name)).statusCode, 201);
      const names = async () =>
        ((await read('/v1/events?limit=100')).json() as { data: { name: string } }[]).map((event) => event.data.name);
      const settle = async (expected: string[]) => {
        let seen = await names();
        for (const deadline = Date.now() + 10_000; seen.join() !== expected.join() && Date.now() < deadline;) {
          await new Promise((resolve) => setTimeout(resolve, 20));
          seen = await names();
        }
        return seen;
      };
      // Not yet 30 days old: rounds run, and keep them.
      await new Promise((resolve) => setTimeout(resolve, 100));
      assert.deepEqual(await settle(['Old 1', 'Old 2', 'Old 3', 'New 1', 'New 2']), [
        'Old 1',
        'Old 2',
        'Old 3',
        'New 1',
        'New 2',
      ]);
      // Read once all five are listed: on PostgreSQL an event is listed once every transaction
      // older than its own has ended, anywhere on the server (docs/events.md#ordering).
      const all = ((await read('/v1/events?limit=100')).json() as { id: string }[]).map((event) => event.id);
      assert.equal(all.length, 5);
      clock.set(T0 + 30 * DAY + 1);
      assert.deepEqual(await settle(['New 1', 'New 2']), ['New 1', 'New 2']);
      // A reader whose last id was pruned goes on from it.
      const after = await read(`/v1/events?after=${all[0]}`);
      assert.equal(after.statusCode, 200, after.body);
      assert.deepEqual(
        (after.json() as { data: { name: string } }[]).map((event) => event.data.name),
        ['New 1', 'New 2'],
      );
      assert.equal((await read('/v1/pets')).json().length, 5);
    },
  );
}

/** A store whose events are numbers, deleted `limit` at a time, with the cutoffs it was asked for. */
function countingStore(events: number) {
  const cutoffs: Date[] = [];
  let left = events;
  const store = {
    async pruneEvents(before: Date, limit: number) {
      cutoffs.push(before);
      const deleted = Math.min(left, limit);
      left -= deleted;
      return deleted;
    },
  } as Partial<Store> as Store;
  return { store, cutoffs, left: () => left };
}

test('a round deletes in bounded batches, lets other work run between them, and stops at 200 batches', async () => {
  const clock = manualClock(T0);
  const { store, cutoffs, left } = countingStore(100_250);
  const retention = startEventRetention({ store, clock, retentionMs: DAY, everyMs: 3_600_000, batchSize: 500 });
  let turns = 0;
  const ticking = setInterval(() => turns++, 0);
  try {
    assert.equal(await retention.round(), 100_000);
    assert.equal(cutoffs.length, 200);
    assert.ok(turns > 0, 'timers ran while the round went on');
    assert.deepEqual(new Set(cutoffs.map((cutoff) => cutoff.getTime())), new Set([T0 - DAY]));
    assert.equal(await retention.round(), 250);
    assert.equal(left(), 0);
    assert.equal(await retention.round(), 0);
  } finally {
    clearInterval(ticking);
    await retention.stop();
  }
});

test('the timer between rounds never keeps the process alive', async () => {
  const timers = () => process.getActiveResourcesInfo().filter((resource) => resource === 'Timeout').length;
  const before = timers();
  const retention = startEventRetention({
    store: countingStore(0).store,
    clock: manualClock(T0),
    retentionMs: DAY,
    everyMs: 3_600_000,
  });
  try {
    assert.equal(timers(), before);
  } finally {
    await retention.stop();
  }
});

test('rounds run on their timer, a failed one is logged and retried, and stop ends them', async () => {
  const clock = manualClock(T0);
  const warnings: string[] = [];
  let calls = 0;
  const store = {
    async pruneEvents() {
      calls++;
      if (calls === 1) throw new Error('database gone');
      return 0;
    },
  } as Partial<Store> as Store;
  const retention = startEventRetention({
    store,
    clock,
    retentionMs: DAY,
    everyMs: 5,
    log: { warn: (_details, message) => void warnings.push(message) },
  });
  for (const deadline = Date.now() + 5000; calls < 3 && Date.now() < deadline;) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  await retention.stop();
  const stoppedAt = calls;
  assert.ok(stoppedAt >= 3, `${stoppedAt} rounds`);
  assert.deepEqual(warnings, ['deleting expired events failed; retrying next round']);
  await new Promise((resolve) => setTimeout(resolve, 30));
  assert.equal(calls, stoppedAt, 'no round after stop');
});
