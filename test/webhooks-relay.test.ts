import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { test, type TestContext } from 'node:test';
import v8 from 'node:v8';
import vm from 'node:vm';
import { eventRowsSql } from '../bench/seed.js';
import { formatEventId } from '../src/events/ids.js';
import { issueKey } from '../src/keys/issue.js';
import type { ClaimedDelivery } from '../src/store/webhooks.js';
import { addPet, listeningApp, manualClock, startApp } from './helpers.js';
import { migratedStore, storeKinds, testTwoInstances } from './stores.js';
import {
  addEndpoint,
  createPetAt,
  eventsListed,
  holdingReceiver,
  outcomeOf,
  relayConfig,
  startReceiver,
  testRelay,
  until,
  webhooksCli,
} from './webhooks.js';

const pet = (name: string) => ({ name, categoryId: 1n, status: 'available' as const });
const pause = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

v8.setFlagsFromString('--expose-gc');
const gc = vm.runInNewContext('gc') as () => void;
const MB = 1024 * 1024;

/**
 * The heap this process retains: the least heapUsed of three readings, each after full
 * collections, so garbage the relay made between its looks is not counted.
 */
async function retainedHeap() {
  let least = Infinity;
  for (let i = 0; i < 3; i++) {
    gc();
    await pause(20);
    gc();
    least = Math.min(least, process.memoryUsage().heapUsed);
  }
  return least;
}

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('hands out a backlog of 100,000 events a bounded batch at a time, its retained heap not growing with it', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const receiver = await holdingReceiver(t);
    await addEndpoint(store, receiver.url);
    const { looked } = testRelay(t, store, {
      env: { PETSTORE_WEBHOOK_CONCURRENCY: '4', PETSTORE_WEBHOOK_TIMEOUT_MS: '5000' },
    });
    // One event answered first: the endpoint is up, and may have its share of the slots.
    receiver.answer(true);
    await store.createPet(pet('Rex'));
    await receiver.waitFor(1);
    await until(async () => (await store.webhooks.stats()).waiting === 0, 5000, 'the success recorded');
    receiver.answer(false);
    // The relay running with nothing to send (a whole look made), /metrics' figures read as a scrape reads them.
    assert.deepEqual(await looked(), []);
    assert.equal((await store.webhooks.stats()).waiting, 0);
    const idle = await retainedHeap();
    await database.execute(eventRowsSql(kind.name, 100_000, '2026-11-28T12:00:00.000Z'));
    await receiver.waitFor(5);
    await pause(500);
    const handed = await database.scalar('SELECT count(*) FROM webhook_deliveries');
    assert.equal(handed, 100, 'one batch handed out, no more, while none is done');
    assert.equal(receiver.received.length, 5, 'PETSTORE_WEBHOOK_CONCURRENCY attempts in flight');
    for (let scrape = 0; scrape < 3; scrape++) {
      const stats = await store.webhooks.stats();
      assert.equal(stats.waiting, 100_000);
      assert.equal(stats.oldestWaitingAt?.toISOString(), '2026-11-28T12:00:00.000Z');
    }
    // What the backlog costs this process once garbage is collected: the attempts in flight and
    // the relay's bookkeeping (the receiver here holds its 4 requests too), not the events.
    const grown = (await retainedHeap()) - idle;
    t.diagnostic(`retained heap: ${(grown / MB).toFixed(2)} MB more with 100,000 events waiting than with none`);
    assert.ok(grown < 4 * MB, `the retained heap grew by ${(grown / MB).toFixed(2)} MB with 100,000 events waiting`);
  });

  it('records a batch of outcomes of two endpoints as the same attempts recorded one at a time, in the order given', async (t) => {
    const [store] = await migratedStore(kind, t);
    const a = (await addEndpoint(store, 'https://a.example/hook')).id;
    const b = (await addEndpoint(store, 'https://b.example/hook')).id;
    for (const name of ['one', 'two', 'three', 'four']) await store.createPet(pet(name));
    await eventsListed(store, 4);
    const now = Date.UTC(2026, 10, 29, 12);
    const wants = [a, b].map((endpointId) => ({ endpointId, count: 8, probe: false }));
    const claim = (at: number) => store.webhooks.claim({ now: at, leaseMs: 60_000, owner: 'test', wants, batch: 100 });
    const claimed = await claim(now);
    assert.equal(claimed.length, 8);
    const inFeedOrder = (id: number) =>
      claimed
        .filter((d) => d.endpointId === id)
        .sort((x, y) => Number(x.position.tx - y.position.tx) || Number(x.position.seq - y.position.seq));
    // The order attempts ended, which is not the feed's: each endpoint's deliveries taken out of it.
    const [as, bs] = [inFeedOrder(a), inFeedOrder(b)];
    const steps: { d: ClaimedDelivery; result: 'ok' | 'retry' | 'give up' }[] = [
      { d: as[2]!, result: 'ok' },
      { d: bs[1]!, result: 'retry' },
      { d: as[0]!, result: 'ok' },
      { d: bs[3]!, result: 'give up' }, // no success since its event was created: b is disabled
      { d: as[3]!, result: 'retry' },
      { d: bs[0]!, result: 'ok' },
      { d: as[1]!, result: 'ok' },
      { d: bs[2]!, result: 'ok' },
    ];
    const plan = steps.map((step, i) => ({ ...step, at: now + 10 + i }));
    const retryAt = now + 5_000;
    const written = await store.webhooks.finish({
      owner: 'test',
      retryMs: 5000,
      outcomes: plan.map(({ d, result, at }) =>
        outcomeOf(d, at, result, retryAt, result === 'give up' ? now - 1 : at - 60_000),
      ),
    });
    assert.deepEqual(written.outcomes, [
      'recorded',
      'recorded',
      'recorded',
      'disabled',
      'recorded',
      'recorded',
      'recorded',
      'recorded',
    ]);
    // Each endpoint's attempts, newest first: the order given, reversed.
    for (const id of [a, b]) {
      const listed = (await store.webhooks.listAttempts(id, 10))!.map(({ eventId, at }) => `${eventId} ${+at - now}`);
      const given = plan
        .filter(({ d }) => d.endpointId === id)
        .map(({ d, at }) => `${formatEventId(d.position)} ${at - now}`);
      assert.deepEqual(listed, given.reverse());
    }
    const endpoints = new Map((await store.webhooks.listEndpoints()).map((e) => [e.id, e]));
    const state = (id: number) => {
      const { lastSuccessAt, lastFailureAt, disabledAt, waiting } = endpoints.get(id)!;
      return { lastSuccessAt, lastFailureAt, disabledAt, waiting };
    };
    const after = (ms: number) => new Date(now + ms);
    assert.deepEqual(state(a), { lastSuccessAt: after(16), lastFailureAt: after(14), disabledAt: null, waiting: 1 });
    assert.deepEqual(state(b), {
      lastSuccessAt: after(17),
      lastFailureAt: after(13),
      disabledAt: after(13),
      waiting: 1,
    });
    // a's retry is due at retryAt, not before; b's waits for b to be enabled again.
    assert.deepEqual(await claim(retryAt - 1), []);
    const again = await claim(retryAt);
    assert.deepEqual(
      again.map((d) => [d.endpointId, formatEventId(d.position), d.attempt]),
      [[a, formatEventId(as[3]!.position), 2]],
    );
  });

  it('stops on request: an attempt that ends within the grace is recorded, one that does not is left leased, then taken over', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    let answer: (() => void) | undefined;
    const slow = await startReceiver(t, (_request, _index, response) => {
      answer = () => response.writeHead(204).end();
    });
    const hang = await holdingReceiver(t);
    const quick = await addEndpoint(store, slow.url);
    const stuck = await addEndpoint(store, hang.url);
    await store.createPet(pet('Rex'));
    const clock = manualClock(Date.now());
    const { relay } = testRelay(t, store, { clock });
    await slow.waitFor(1);
    await hang.waitFor(1);
    const stopped = relay.stop(300);
    await pause(100);
    answer!();
    await stopped;
    const attempts = async (id: number) => (await webhooksCli(store, ['deliveries', String(id), '--json'])).out;
    assert.equal((await attempts(quick.id)).length, 1);
    assert.equal((JSON.parse((await attempts(quick.id))[0]!) as { status: number }).status, 204);
    assert.deepEqual(await attempts(stuck.id), [], 'stopped, not recorded as a failure');
    const listed = (await webhooksCli(store, ['list', '--json'])).out.map(
      (line) => JSON.parse(line) as { id: number; waiting: number },
    );
    assert.deepEqual(
      listed.map((e) => [e.id, e.waiting]),
      [
        [quick.id, 0],
        [stuck.id, 1],
      ],
    );
    // Not given back: the receiver may still be at work on it. It is leased until its lease ends.
    assert.equal(await database.scalar('SELECT count(*) FROM webhook_deliveries WHERE lease_owner IS NOT NULL'), 1);
    const receiverBack = hang.received.length;
    const { relay: next, looked } = testRelay(t, store, { clock });
    if (kind.name === 'PostgreSQL') {
      // Other instances may be running: the attempt is taken over once the lease has expired.
      assert.deepEqual(await looked(), [], 'not while the lease lasts');
      clock.set(clock.now() + relayConfig().webhookLeaseMs);
      next.wake();
    }
    // SQLite: one process serves the file, so the relay starting takes every lease back at once.
    await until(() => hang.received.length > receiverBack, 3000, 'the attempt made again');
    await next.stop(0);
  });

  it('answers API requests promptly while every attempt hangs on the receiver', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const app = await listeningApp(t, { store, clock: manualClock(Date.now()) });
    const base = `http://127.0.0.1:${app.port}`;
    const receiver = await holdingReceiver(t);
    for (let i = 0; i < 4; i++) await addEndpoint(store, receiver.url);
    testRelay(t, store, {
      env: { PETSTORE_WEBHOOK_CONCURRENCY: '8', PETSTORE_WEBHOOK_TIMEOUT_MS: '1000', PETSTORE_WEBHOOK_RETRY_MS: '10' },
    });
    const slowest: number[] = [];
    const deadline = Date.now() + 20_000;
    for (let i = 0; i < 150 && Date.now() < deadline; i++) {
      const started = performance.now();
      const created = await createPetAt(base, app.key, JSON.stringify({ name: `Rex ${i}`, categoryId: i }));
      assert.equal(created.status, 201);
      await created.arrayBuffer();
      const health = await fetch(`${base}/healthz`);
      assert.equal(health.status, 200);
      await health.arrayBuffer();
      slowest.push(performance.now() - started);
    }
    assert.equal(slowest.length, 150);
    // One each: none has answered yet, so each holds one slot until its attempt times out.
    assert.ok(receiver.received.length >= 4, `${receiver.received.length} attempts held by the receiver`);
    const worst = Math.max(...slowest);
    // Generous: a shared machine, two cores. A delay by a hanging attempt would be a second.
    assert.ok(worst < 500, `the slowest createPet + healthz took ${Math.round(worst)} ms`);
  });

  it('answers API requests promptly while the relay delivers a backlog of 20,000 events to a receiver as fast as it answers', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const app = await listeningApp(t, { store, clock: manualClock(Date.now()) });
    const base = `http://127.0.0.1:${app.port}`;
    const receiver = await startReceiver(t);
    await addEndpoint(store, receiver.url);
    await database.execute(eventRowsSql(kind.name, 20_000, new Date().toISOString()));
    let attempts = 0;
    // The receiver runs in this process too: a quarter of the default slots keeps its own share
    // of the process's time within what the bounds below leave for a busy machine.
    testRelay(t, store, { countAttempt: () => void attempts++, env: { PETSTORE_WEBHOOK_CONCURRENCY: '16' } });
    await until(() => attempts >= 50, 5000, '50 deliveries');
    const times: number[] = [];
    const before = attempts;
    for (let i = 0; i < 200; i++) {
      const started = performance.now();
      const created = await createPetAt(base, app.key, JSON.stringify({ name: `Rex ${i}`, categoryId: i }));
      assert.equal(created.status, 201);
      await created.arrayBuffer();
      times.push(performance.now() - started);
    }
    assert.ok(attempts - before >= 100, `${attempts - before} deliveries made meanwhile`);
    times.sort((a, b) => a - b);
    // Generous bounds for a shared machine: a createPet takes a few ms; a relay that made the
    // API wait for its own writes took tens of ms at the median.
    assert.ok(times[100]! < 50, `median createPet ${times[100]!.toFixed(1)} ms`);
    assert.ok(times[199]! < 1000, `slowest createPet ${times[199]!.toFixed(1)} ms`);
  });

  it("shows its relay's attempts by result, the events waiting and the endpoints disabled in /metrics", async (t) => {
    // One clock for the events' stamps, the retries and /metrics, which reads the gauges at most once a second by it.
    const clock = manualClock(Date.now());
    const database = await kind.createDatabase(t);
    const store = database.open({ clock });
    await store.migrate();
    // The app's own relay, as `serve` runs it, counting into the app's /metrics.
    const app = await startApp(t, {
      store,
      clock,
      deliverWebhooks: true,
      env: { PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1', PETSTORE_WEBHOOK_RETRY_MS: '20' },
      relay: { pollMs: 20, graceMs: 500 },
    });
    const { key } = await issueKey(store, 'prometheus', new Date(), { scopes: ['metrics:read'] });
    // The first attempt is held until the test answers it, with a 500; the next get a 204 at once.
    const held: ServerResponse[] = [];
    const receiver = await startReceiver(t, (_request, index, response) => {
      if (index === 0) held.push(response);
      else response.writeHead(204).end();
    });
    const endpoint = await addEndpoint(store, receiver.url);
    const metrics = async () =>
      (await app.app.inject({ method: 'GET', url: '/metrics', headers: { authorization: `Bearer ${key}` } })).body;
    await addPet(app);
    await receiver.waitFor(1);
    clock.set(clock.now() + 2500);
    const waiting = await metrics();
    assert.match(waiting, /^petstore_webhook_events_waiting 1$/m);
    assert.match(waiting, /^petstore_webhook_oldest_waiting_seconds 2.5$/m);
    assert.match(waiting, /^petstore_webhook_endpoints_disabled 0$/m);
    held[0]!.writeHead(500).end();
    const recorded = async () => (await webhooksCli(store, ['deliveries', String(endpoint.id), '--json'])).out.length;
    await until(async () => (await recorded()) === 1, 3000, 'the failure recorded');
    // Past the retry, by the clock the relay reads.
    clock.set(clock.now() + 100);
    await receiver.waitFor(2);
    await until(async () => (await store.webhooks.stats()).waiting === 0, 3000, 'the success recorded');
    // Within the second, the gauges read before; a second later, read anew.
    assert.match(await metrics(), /^petstore_webhook_events_waiting 1$/m);
    clock.set(clock.now() + 1001);
    const text = await metrics();
    assert.match(text, /^petstore_webhook_attempts_total\{result="success"\} 1$/m);
    assert.match(text, /^petstore_webhook_attempts_total\{result="http_error"\} 1$/m);
    assert.match(text, /^petstore_webhook_attempts_total\{result="timeout"\} 0$/m);
    assert.match(text, /^petstore_webhook_events_waiting 0$/m);
    assert.match(text, /^petstore_webhook_oldest_waiting_seconds 0$/m);
    // The relay's store calls are timed like the requests' (docs/operations.md#metrics).
    for (const method of ['webhooks.claim', 'webhooks.finish', 'webhooks.relayEndpoints']) {
      const count = new RegExp(
        `^petstore_store_duration_seconds_count\\{method="${method}",outcome="ok"\\} ([0-9]+)$`,
        'm',
      );
      assert.ok(Number(count.exec(text)?.[1] ?? 0) >= 1, `${method} timed`);
    }
  });
}

testTwoInstances('two relays share the deliveries, each attempt made once', async (t, [one, two]) => {
  const receiver = await startReceiver(
    t,
    (_request, _index, response) => void setTimeout(() => response.writeHead(204).end(), 20),
  );
  await addEndpoint(one, receiver.url);
  for (let i = 0; i < 30; i++) await one.createPet(pet(`Rex ${i}`));
  const made = [0, 0];
  const env = { PETSTORE_WEBHOOK_CONCURRENCY: '2' };
  const relays = [
    testRelay(t, one, { env, countAttempt: () => void made[0]!++ }),
    testRelay(t, two, { env, countAttempt: () => void made[1]!++ }),
  ];
  await receiver.waitFor(30);
  // Every outcome written, then a whole look of each relay: neither sends anything again.
  await until(async () => (await one.webhooks.stats()).waiting === 0, 5000, 'every delivery recorded');
  assert.deepEqual(await Promise.all(relays.map(({ looked }) => looked())), [[], []]);
  const ids = receiver.received.map((request) => String(request.headers['webhook-id']));
  assert.equal(ids.length, 30, 'no event sent twice');
  assert.equal(new Set(ids).size, 30);
  assert.ok(made[0]! > 0 && made[1]! > 0, `both instances delivered: ${made.join(' and ')}`);
});

testTwoInstances(
  'an attempt abandoned by a killed instance is taken over by another once its lease expires',
  async (t, [doomed, survivor]) => {
    // The first request is never answered: the instance making it dies with it.
    const receiver = await startReceiver(t, (_request, index, response) => {
      if (index > 0) response.writeHead(204).end();
    });
    const endpoint = await addEndpoint(doomed, receiver.url);
    await doomed.createPet(pet('Rex'));
    const env = { PETSTORE_WEBHOOK_TIMEOUT_MS: '1000', PETSTORE_WEBHOOK_LEASE_MS: '1500' };
    const clock = manualClock(Date.now());
    const { relay } = testRelay(t, doomed, { env, clock });
    await receiver.waitFor(1);
    const leasedAt = clock.now();
    // Its connections go as a killed process's would: it can record nothing more.
    await doomed.close();
    await relay.stop(0);
    const { relay: taking, looked } = testRelay(t, survivor, { env, clock });
    clock.set(leasedAt + 1499);
    taking.wake();
    assert.deepEqual(await looked(), [], 'not taken over while the lease lasts');
    clock.set(leasedAt + 1500);
    taking.wake();
    const [first, second] = await receiver.waitFor(2, 10_000);
    assert.equal(second!.headers['webhook-id'], first!.headers['webhook-id']);
    const recorded = async () => (await webhooksCli(survivor, ['deliveries', String(endpoint.id), '--json'])).out;
    await until(async () => (await recorded()).length > 0, 3000, 'the attempt recorded');
    const attempts = (await recorded()).map((line) => JSON.parse(line) as { attempt: number; status: number });
    assert.deepEqual(
      attempts.map((a) => [a.attempt, a.status]),
      [[2, 204]],
    );
    assert.deepEqual(await looked(), [], 'delivered, and not again');
    assert.equal(receiver.received.length, 2);
  },
);

testTwoInstances(
  'two relays writing outcomes for three failing-then-succeeding endpoints at once deliver everything, with no write lost',
  async (t, [one, two]) => {
    const receivers: Awaited<ReturnType<typeof startReceiver>>[] = [];
    for (let r = 0; r < 3; r++) {
      // Each event's first attempt fails, its second succeeds: outcomes of both kinds, for every
      // endpoint, from both relays. (Failing every other request could fail one event every time:
      // sent first in each batch of two, it met the failing turn each time, its back-off doubling.)
      const seen = new Set<unknown>();
      receivers.push(
        await startReceiver(t, (request, _index, response) => {
          const id = request.headers['webhook-id'];
          response.writeHead(seen.has(id) ? 200 : 500).end();
          seen.add(id);
        }),
      );
    }
    for (const receiver of receivers) await addEndpoint(one, receiver.url);
    for (let i = 0; i < 40; i++) await one.createPet(pet(`Rex ${i}`));
    const env = { PETSTORE_WEBHOOK_CONCURRENCY: '4', PETSTORE_WEBHOOK_RETRY_MS: '10' };
    const relays = [testRelay(t, one, { env }), testRelay(t, two, { env })];
    const delivered = (receiver: Awaited<ReturnType<typeof startReceiver>>) => {
      const ids = receiver.received.map((request) => request.headers['webhook-id']);
      return new Set(ids.filter((id, index) => ids.indexOf(id) < index));
    };
    await until(() => receivers.every((receiver) => delivered(receiver).size === 40), 20_000, 'every event delivered');
    const lost = relays.flatMap(({ lines }) =>
      lines.filter((line) => /recording|failed to end|cannot read/.test(String(line.msg))),
    );
    assert.deepEqual(lost, []);
  },
);
