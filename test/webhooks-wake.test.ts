import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import pg from 'pg';
import { addPet, startApp } from './helpers.js';
import { POSTGRES_URL, storeKinds, testTwoInstances } from './stores.js';
import { addEndpoint, startReceiver, testRelay, until, watchLooks } from './webhooks.js';

// Far longer than any test: a delivery that comes, comes because a commit woke the relay.
const NO_POLL_MS = 600_000;

/** The time from each of `count` pets' 201 (made by `create`) to its delivery at `receiver`, one at a time. */
async function lags(
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  count: number,
  create: () => Promise<unknown>,
) {
  const lags: number[] = [];
  for (let i = 0; i < count; i++) {
    const before = receiver.received.length;
    await create();
    const answered = Date.now();
    const [delivered] = (await receiver.waitFor(before + 1, 5000)).slice(before);
    lags.push(delivered!.at - answered);
  }
  return lags.sort((a, b) => a - b);
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: each pet created wakes the service's relay: an idle receiver gets it at once, with no timer to wait for`,
    { skip: kind.skip },
    async (t: TestContext) => {
      const database = await kind.createDatabase(t);
      const store = database.open();
      await store.migrate();
      const receiver = await startReceiver(t);
      const { hear, looks } = watchLooks();
      const app = await startApp(t, {
        store,
        deliverWebhooks: true,
        env: { PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1' },
        relay: { pollMs: NO_POLL_MS, graceMs: 200, looked: hear },
      });
      // The relay's first look is made, with no endpoint yet: from here on only a wake makes one.
      await until(() => looks() > 0, 5000, "the relay's first look");
      await addEndpoint(store, receiver.url);
      // An endpoint's first event: the relay reads the endpoints anew after the wake.
      await addPet(app, { name: 'first', categoryId: 1 });
      await receiver.waitFor(1, 3000);
      const times = await lags(receiver, 10, () => addPet(app, { name: 'Rex', categoryId: 2 }));
      t.diagnostic(`201 to delivery: ${times.join(', ')} ms`);
      assert.ok(times[9]! < 1000, `the slowest took ${times[9]} ms`);
    },
  );
}

testTwoInstances(
  'a pet created on one instance wakes the relay of another, which delivers it, woken again after its listening connection was cut',
  async (t, [creating, delivering]) => {
    const receiver = await startReceiver(t);
    await addEndpoint(creating, receiver.url);
    const startedAt = new Date();
    const { looked } = testRelay(t, delivering, { pollMs: NO_POLL_MS });
    await looked();
    const create = () => creating.createPet({ name: 'Rex', categoryId: 1n, status: 'available' });
    const times = await lags(receiver, 5, create);
    t.diagnostic(`201 on one instance to delivery by the other: ${times.join(', ')} ms`);
    assert.ok(times[4]! < 1000, `the slowest took ${times[4]} ms`);

    // The delivering instance's listening connection ends (a restart of the server, a network cut).
    const admin = new pg.Client({ connectionString: POSTGRES_URL });
    await admin.connect();
    t.after(() => admin.end());
    const { rows } = await admin.query<{ pid: number }>(
      "SELECT pid FROM pg_stat_activity WHERE query = 'LISTEN petstore_events' AND backend_start >= $1",
      [startedAt],
    );
    assert.ok(rows.length >= 1, 'a listening connection');
    await admin.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [rows.map((row) => row.pid)]);
    const again = await lags(receiver, 5, create);
    t.diagnostic(`after the cut: ${again.join(', ')} ms`);
    assert.ok(again[4]! < 2000, `the slowest took ${again[4]} ms`);
  },
);
