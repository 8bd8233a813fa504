import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { eventRowsSql } from '../bench/seed.js';
import { reserveOf } from '../src/events/slots.js';
import { addPet, startApp } from './helpers.js';
import { storeKinds, type StoreKind } from './stores.js';
import { addEndpoint, holdingReceiver, startReceiver, until } from './webhooks.js';

// Long enough that no attempt to a hanging receiver ends during a test: what the healthy
// endpoint gets, it gets beside attempts that are all still held.
const HANG_ENV = {
  PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
  PETSTORE_WEBHOOK_TIMEOUT_MS: '60000',
};

/** The service delivering as `serve` runs it (its own relay, woken by its commits), on a fresh database of `kind`. */
async function deliveringService(t: TestContext, kind: StoreKind, env: Record<string, string> = {}) {
  const database = await kind.createDatabase(t);
  const store = database.open();
  await store.migrate();
  const app = await startApp(t, {
    store,
    deliverWebhooks: true,
    env: { ...HANG_ENV, ...env },
    relay: { pollMs: 100, graceMs: 200 },
  });
  return { database, store, app };
}

/**
 * The service delivering as `serve` runs it (its own relay, woken by its commits), on a fresh
 * database of `kind`: a healthy receiver whose endpoint is up (one event delivered), then
 * `hanging` endpoints at a receiver that holds every request, and `backlog` events, owed to
 * every endpoint; resolves once the healthy one has received them all, beside the attempts held.
 */
async function serviceWithHangingEndpoints(
  t: TestContext,
  kind: StoreKind,
  { hanging, backlog }: { hanging: number; backlog: number },
) {
  const { database, store, app } = await deliveringService(t, kind);
  const healthy = await startReceiver(t);
  const hang = await holdingReceiver(t);
  await addEndpoint(store, healthy.url);
  await addPet(app, { name: 'first', categoryId: 1 });
  await healthy.waitFor(1);
  for (let i = 0; i < hanging; i++) await addEndpoint(store, `${hang.url}?endpoint=${i}`);
  await database.execute(eventRowsSql(kind.name, backlog));
  await healthy.waitFor(1 + backlog, 30_000);
  return { app, store, database, healthy, hang };
}

/** Creates `count` pets one at a time, each once the last one reached `healthy`; the time from each 201 to its delivery. */
async function lagsOf(
  app: Awaited<ReturnType<typeof startApp>>,
  healthy: Awaited<ReturnType<typeof startReceiver>>,
  count: number,
) {
  const lags: number[] = [];
  for (let i = 0; i < count; i++) {
    const before = healthy.received.length;
    const pet = await addPet(app, { name: `Rex ${i}`, categoryId: i });
    const answered = Date.now();
    const [delivered] = (await healthy.waitFor(before + 1, 5000)).slice(before);
    assert.match(delivered!.body, new RegExp(`"data":\\{"id":${pet.id},`), 'the new pet, not a backlog event');
    lags.push(delivered!.at - answered);
  }
  return lags;
}

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('with 30 endpoints hanging, each owed a backlog, a healthy endpoint gets each new pet within a second of its 201', async (t) => {
    const { app, healthy, hang } = await serviceWithHangingEndpoints(t, kind, {
      hanging: 30,
      backlog: 500,
    });
    // Every hanging endpoint holds one attempt: none has answered, so none gets more.
    await hang.waitFor(30);
    const lags = await lagsOf(app, healthy, 20);
    t.diagnostic(`lag from 201 to delivery: max ${Math.max(...lags)} ms`);
    assert.ok(Math.max(...lags) < 1000, `lags ${lags.join(', ')} ms`);
    assert.equal(hang.received.length, 30, 'one attempt each, all still held');
  });

  it('with 300 endpoints hanging and 10,000 events each owed, those not up hold three quarters of the slots, a healthy one is served', async (t) => {
    const { app, healthy, hang } = await serviceWithHangingEndpoints(t, kind, {
      hanging: 300,
      backlog: 10_000,
    });
    const concurrency = 64;
    const others = concurrency - reserveOf(concurrency);
    await hang.waitFor(others);
    const lags = await lagsOf(app, healthy, 10);
    t.diagnostic(`lag from 201 to delivery: max ${Math.max(...lags)} ms`);
    assert.ok(Math.max(...lags) < 1000, `lags ${lags.join(', ')} ms`);
    assert.equal(hang.received.length, others, 'three quarters of the slots, the rest kept for endpoints that are up');
  });

  it('an endpoint that answered, then hangs, holds its share of the slots and no more, another served beside it', async (t) => {
    const { database, store, app } = await deliveringService(t, kind, { PETSTORE_WEBHOOK_CONCURRENCY: '8' });
    const flaky = await holdingReceiver(t);
    const healthy = await startReceiver(t);
    await addEndpoint(store, flaky.url);
    await addEndpoint(store, healthy.url);
    // Both answer the first event: both are up.
    flaky.answer(true);
    await addPet(app, { name: 'first', categoryId: 1 });
    await flaky.waitFor(1);
    await healthy.waitFor(1);
    await until(async () => (await store.webhooks.stats()).waiting === 0, 5000, 'both successes recorded');
    flaky.answer(false);
    await database.execute(eventRowsSql(kind.name, 200));
    // Two endpoints up share the eight slots: four each, whatever the one that hangs would take.
    await until(() => healthy.received.length === 201, 10_000, 'the backlog delivered to the healthy endpoint');
    const lags = await lagsOf(app, healthy, 5);
    assert.ok(Math.max(...lags) < 1000, `lags ${lags.join(', ')} ms`);
    assert.equal(flaky.received.length, 1 + 4, 'its share held, no more');
  });
}
