import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import { manualClock, startApp } from './helpers.js';
import { storeKinds, type StoreKind } from './stores.js';

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);

/** The service on a fresh database of `kind`, and `feed()`: every event, read with an events:read key. */
async function appOn(t: TestContext, kind: StoreKind) {
  const database = await kind.createDatabase(t);
  const clock = manualClock(Date.UTC(2026, 10, 22, 10, 0, 0, 123));
  const store = database.open({ clock });
  await store.migrate();
  const app = await startApp(t, { store, clock });
  const { key } = await issueKey(store, 'feed reader', new Date(clock.now()), { scopes: ['events:read'] });
  const read = (options: InjectOptions) =>
    app.app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
  // On PostgreSQL an event is listed once every transaction older than its own has ended, on
  // the whole server (docs/events.md#ordering): another client's write may hold it back a moment.
  const feed = async (expected: number) => {
    for (const deadline = Date.now() + 10_000; ; await new Promise((resolve) => setTimeout(resolve, 20))) {
      const response = await read({ method: 'GET', url: '/v1/events?limit=100' });
      assert.equal(response.statusCode, 200, response.body);
      assert.equal(response.headers.link, undefined, 'the test reads at most 100 events');
      if ((JSON.parse(response.body) as unknown[]).length >= expected || Date.now() > deadline) return response.body;
    }
  };
  return { ...app, database, read, feed };
}

/** The raw `data` text of each event in a feed body, in order, found by its fixed place in the event. */
function rawData(body: string): string[] {
  const found = [...body.matchAll(/"data":(\{[^}]*\})\}/g)].map((match) => match[1]!);
  assert.equal(found.length, (JSON.parse(body) as unknown[]).length, 'one data object per event');
  return found;
}

const post = (payload: unknown, headers: Record<string, string> = {}) =>
  ({ method: 'POST', url: '/v1/pets', payload: payload as string, headers }) as InjectOptions;

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('each 201 has one pet.created event whose data is the 201 body byte for byte', async (t) => {
    const { call, feed, clock } = await appOn(t, kind);
    const names = [
      'Rex',
      'quote " and backslash \\',
      'é 😀 中文',
      'line\u2028separator',
      ' spaced ',
      '/slash</script>',
    ];
    const categories = [INT64_MAX, INT64_MIN, 2n ** 53n + 1n, 0n, -1n, 7n];
    const bodies: string[] = [];
    for (const [i, name] of names.entries()) {
      // Written by hand: JSON.stringify cannot write a bigint, and these are beyond 2^53.
      const payload = `{"name":${JSON.stringify(name)},"categoryId":${categories[i]},"status":"sold"}`;
      const created: LightMyRequestResponse = await call({
        ...post(payload, { 'content-type': 'application/json' }),
        // With and without an Idempotency-Key: both paths write the event.
        headers: { 'content-type': 'application/json', ...(i % 2 === 1 && { 'idempotency-key': `k-${i}` }) },
      });
      assert.equal(created.statusCode, 201, created.body);
      bodies.push(created.body);
    }
    const body = await feed(bodies.length);
    assert.deepEqual(rawData(body), bodies);
    const events = JSON.parse(body) as { id: string; type: string; createdAt: string }[];
    for (const event of events) {
      assert.equal(event.type, 'pet.created');
      assert.equal(event.createdAt, new Date(clock.now()).toISOString());
      assert.match(event.id, /^evt_[0-9a-f]{32}$/);
    }
    assert.equal(new Set(events.map((event) => event.id)).size, events.length);
  });

  it('creates made at once (group commit, batched statements) each get their event', async (t) => {
    const { call, feed } = await appOn(t, kind);
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        call(post({ name: `Batch ${i}`, categoryId: i, status: i % 2 ? 'pending' : 'available' })),
      ),
    );
    const bodies = answers.map((answer) => {
      assert.equal(answer.statusCode, 201, answer.body);
      return answer.body;
    });
    const data = rawData(await feed(bodies.length));
    assert.deepEqual([...data].sort(), [...bodies].sort());
    // Listed once each, in id order (which need not be the animals' order across batches: two
    // batches commit in either order, and the feed lists events as they become final).
    const events = JSON.parse(await feed(bodies.length)) as { id: string }[];
    assert.ok(events.every((event, i) => i === 0 || events[i - 1]!.id < event.id));
  });

  it('an idempotent replay, a mismatch and refused requests write no event', async (t) => {
    const { call, feed, app } = await appOn(t, kind);
    const first = await call(post({ name: 'Once', categoryId: 1 }, { 'idempotency-key': 'once' }));
    assert.equal(first.statusCode, 201);
    const replay = await call(post({ name: 'Once', categoryId: 1 }, { 'idempotency-key': 'once' }));
    assert.equal(replay.statusCode, 201);
    assert.equal(replay.headers['idempotent-replayed'], 'true');
    assert.equal((await call(post({ name: 'Other', categoryId: 1 }, { 'idempotency-key': 'once' }))).statusCode, 422);
    assert.equal((await call(post({ name: '', categoryId: 1 }))).statusCode, 400);
    assert.equal((await call(post({ name: 'X', categoryId: 1, id: 5 }))).statusCode, 400);
    const json = { 'content-type': 'application/json' };
    assert.equal((await call(post(`{"name":"X","categoryId":${2n ** 63n}}`, json))).statusCode, 400);
    const unauthenticated = await app.inject({ ...post({ name: 'X', categoryId: 1 }) });
    assert.equal(unauthenticated.statusCode, 401);
    assert.deepEqual(rawData(await feed(1)), [first.body]);
  });

  it('an animal is never stored without its event: a refused event write fails the create', async (t) => {
    const { call, feed, database } = await appOn(t, kind);
    const kept = await call(post({ name: 'Before', categoryId: 1 }));
    assert.equal(kept.statusCode, 201);
    await database.execute(
      kind.name === 'SQLite'
        ? "CREATE TRIGGER refuse_events BEFORE INSERT ON events BEGIN SELECT RAISE(ABORT, 'events refused'); END"
        : "CREATE FUNCTION refuse_events() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'events refused'; END $$; " +
            'CREATE TRIGGER refuse_events BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION refuse_events()',
    );
    const failed = await Promise.all([
      call(post({ name: 'Lost 1', categoryId: 1 })),
      call(post({ name: 'Lost 2', categoryId: 2 }, { 'idempotency-key': 'lost' })),
    ]);
    for (const answer of failed) assert.equal(answer.statusCode, 500, answer.body);
    const pets = await call({ method: 'GET', url: '/v1/pets' });
    assert.deepEqual(
      (pets.json() as { name: string }[]).map((pet) => pet.name),
      ['Before'],
    );
    await database.execute('DROP TRIGGER refuse_events' + (kind.name === 'SQLite' ? '' : ' ON events'));
    // The key of the failed request is free: nothing was stored for it.
    const retried = await call(post({ name: 'Lost 2', categoryId: 2 }, { 'idempotency-key': 'lost' }));
    assert.equal(retried.statusCode, 201);
    assert.equal(retried.headers['idempotent-replayed'], undefined);
    assert.deepEqual(rawData(await feed(2)), [kept.body, retried.body]);
  });
}
