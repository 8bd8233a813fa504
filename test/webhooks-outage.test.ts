import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { eventRowsSql } from '../bench/seed.js';
import { formatEventId } from '../src/events/ids.js';
import type { AttemptOutcome } from '../src/store/webhooks.js';
import { manualClock } from './helpers.js';
import { storeKinds } from './stores.js';
import { addEndpoint, eventsListed, outcomeOf, startReceiver, testRelay, until, webhooksCli } from './webhooks.js';

const pet = (name: string) => ({ name, categoryId: 1n, status: 'available' as const });

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('after an outage, the endpoint is probed on its back-off, and its first success releases every event waiting, oldest first', async (t) => {
    const database = await kind.createDatabase(t);
    const clock = manualClock(Date.now());
    const store = database.open({ clock });
    await store.migrate();
    let up = false;
    const receiver = await startReceiver(
      t,
      (_request, _index, response) => void response.writeHead(up ? 204 : 503).end(),
    );
    const endpoint = await addEndpoint(store, receiver.url);
    for (let i = 0; i < 20; i++) await store.createPet(pet(`Rex ${i}`));
    const started = clock.now();
    // One attempt at a time, so the order they arrive in is the order they were made.
    const { relay, lines, looked } = testRelay(t, store, {
      clock,
      random: () => 0.5,
      env: { PETSTORE_WEBHOOK_CONCURRENCY: '1', PETSTORE_WEBHOOK_RETRY_MS: '1000' },
    });
    // Two failures in a row: the endpoint is down. The second event's retry, 1.25 s after its
    // attempt, comes before the endpoint's back-off (2.5 s): the probe is due then.
    await until(() => lines.filter((line) => line.msg === 'webhook attempt failed; retrying').length === 2);
    assert.equal(receiver.received.length, 2);
    const attempts = JSON.parse(
      `[${(await webhooksCli(store, ['deliveries', String(endpoint.id), '--json'])).out.join(',')}]`,
    ) as unknown[];
    assert.equal(attempts.length, 2, 'both failures recorded');
    // The receiver is back; no event is due on its own, and the endpoint's probe is not yet.
    up = true;
    clock.set(started + 1249);
    relay.wake();
    assert.deepEqual(await looked(), [], 'not probed before its back-off');
    clock.set(started + 1250);
    relay.wake();
    // The probe (the oldest event), then the other 19 at once, the clock standing still.
    const got = await receiver.waitFor(22);
    const ids = got.slice(2).map((request) => String(request.headers['webhook-id']));
    const feed = (await store.listEvents({ limit: 100 })).map((event) => formatEventId(event.position));
    assert.deepEqual(ids, feed, 'every event, oldest first');
    await until(async () => (await store.webhooks.stats()).waiting === 0, 5000, 'every success recorded');
  });

  it("writes an attempt's outcome only under the lease still held: one another relay took over is not recorded", async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const endpoint = await addEndpoint(store, 'https://hooks.example/one');
    await store.createPet(pet('Rex'));
    await eventsListed(store, 1);
    const now = Date.UTC(2026, 10, 30, 12);
    const wants = [{ endpointId: endpoint.id, count: 1, probe: false }];
    const [first] = await store.webhooks.claim({ now, leaseMs: 1000, owner: 'stalled', wants, batch: 10 });
    assert.deepEqual(
      await store.webhooks.claim({ now: now + 999, leaseMs: 1000, owner: 'other', wants, batch: 10 }),
      [],
    );
    const [taken] = await store.webhooks.claim({ now: now + 1000, leaseMs: 1000, owner: 'other', wants, batch: 10 });
    assert.equal(taken!.attempt, 2);
    // The relay whose attempt outlived its lease writes nothing: not the attempt, not the retry.
    const late = await store.webhooks.finish({
      owner: 'stalled',
      retryMs: 1000,
      outcomes: [outcomeOf(first!, now + 1500, 'retry')],
    });
    assert.deepEqual(late, { outcomes: ['lost'], endpoints: [] });
    assert.deepEqual(await store.webhooks.listAttempts(endpoint.id, 10), []);
    assert.deepEqual(
      await store.webhooks.claim({ now: now + 1999, leaseMs: 1000, owner: 'third', wants, batch: 10 }),
      [],
    );
    const written = await store.webhooks.finish({
      owner: 'other',
      retryMs: 1000,
      outcomes: [outcomeOf(taken!, now + 1600, 'ok')],
    });
    assert.deepEqual(written.outcomes, ['recorded']);
    assert.deepEqual(
      (await store.webhooks.listAttempts(endpoint.id, 10))!.map((a) => [a.attempt, a.status]),
      [[2, 204]],
    );
    assert.equal((await store.webhooks.stats()).waiting, 0);
  });

  it('keeps every attempt of an event still waiting and at least the last 1,000, and lets the rest go', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const endpoint = await addEndpoint(store, 'https://hooks.example/one');
    await database.execute(eventRowsSql(kind.name, 1101));
    await eventsListed(store, 100);
    const now = Date.UTC(2026, 10, 30, 12);
    const claim = (at: number, count: number) =>
      store.webhooks.claim({
        now: at,
        leaseMs: 60_000,
        owner: 'relay',
        wants: [{ endpointId: endpoint.id, count, probe: false }],
        batch: 100,
      });
    const finish = (outcomes: AttemptOutcome[]) => store.webhooks.finish({ owner: 'relay', retryMs: 1000, outcomes });
    // The oldest event fails and waits a day for its retry.
    const [waiting] = await claim(now, 1);
    await finish([outcomeOf(waiting!, now, 'retry', now + 86_400_000)]);
    // 1,100 others are delivered after it.
    for (let done = 0; done < 1100;) {
      const batch = await claim(now + 1, Math.min(100, 1100 - done));
      await finish(batch.map((delivery) => outcomeOf(delivery, now + 2, 'ok')));
      done += batch.length;
    }
    const kept = (await store.webhooks.listAttempts(endpoint.id, 5000))!;
    const waitingId = formatEventId(waiting!.position);
    assert.equal(kept.filter((a) => a.eventId === waitingId).length, 1, 'the attempt of the event still waiting');
    assert.ok(kept.length >= 1001, `${kept.length} attempts kept`);
    // Once it is delivered, its old attempt is one like any other: past the last 1,000, let go
    // (on PostgreSQL, by the next write: a statement reads the database as it began).
    const [again] = await claim(now + 86_400_000, 1);
    assert.equal(formatEventId(again!.position), waitingId);
    await finish([outcomeOf(again!, now + 86_400_001, 'ok')]);
    await database.execute(eventRowsSql(kind.name, 1));
    const listedLast = async () => (await store.listEvents({ limit: 1, after: again!.position })).length > 0;
    await until(listedLast, 10_000, 'the last event listed');
    const [last] = await claim(now + 86_400_002, 1);
    await finish([outcomeOf(last!, now + 86_400_003, 'ok')]);
    const after = (await store.webhooks.listAttempts(endpoint.id, 5000))!;
    assert.equal(after.length, 1000);
    assert.deepEqual(
      after.filter((a) => a.eventId === waitingId).map((a) => a.attempt),
      [2],
    );
  });
}
