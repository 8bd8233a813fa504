import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { issueKey } from '../src/keys/issue.js';
import type { Store } from '../src/store/store.js';
import { manualClock, startApp } from './helpers.js';
import { storeKinds, type StoreKind } from './stores.js';
import {
  addEndpoint,
  holdingReceiver,
  relayConfig,
  startReceiver,
  testRelay,
  until,
  webhooksCli,
  type Lines,
} from './webhooks.js';

/**
 * The service on a fresh database of `kind`, and the feed as text. Its clock, which stamps the
 * events too, starts at the real time (signatures carry it) and moves only when the test moves it.
 */
async function appOn(t: TestContext, kind: StoreKind) {
  const database = await kind.createDatabase(t);
  const clock = manualClock(Date.now());
  const store = database.open({ clock });
  await store.migrate();
  const app = await startApp(t, { store, clock });
  const { key } = await issueKey(store, 'feed reader', new Date(), { scopes: ['events:read'] });
  const feed = async () => {
    const response = await app.app.inject({
      method: 'GET',
      url: '/v1/events?limit=100',
      headers: { authorization: `Bearer ${key}` },
    });
    assert.equal(response.statusCode, 200, response.body);
    return response.body;
  };
  const create = async (pet: string) => {
    const response = await app.call({
      method: 'POST',
      url: '/v1/pets',
      payload: pet,
      headers: { 'content-type': 'application/json' },
    });
    assert.equal(response.statusCode, 201, response.body);
    return response.body;
  };
  return { ...app, store, database, feed, create };
}

/** Attempts as `webhooks deliveries --json` lists them, newest first. */
async function attemptsOf(store: Store, id: number) {
  const { out } = await webhooksCli(store, ['deliveries', String(id), '--json']);
  return out.map(
    (line) =>
      JSON.parse(line) as { eventId: string; attempt: number; at: string; status: number | null; error: string | null },
  );
}

/** Waits until the relay has logged `count` failed attempts; the last one's log line. */
async function failedAttempt(lines: Lines, count: number) {
  const failed = () => lines.filter((line) => String(line.msg).startsWith('webhook attempt failed'));
  await until(() => failed().length >= count, 5000, `failed attempt ${count} logged`);
  assert.equal(failed().length, count, 'no attempt before its time');
  return failed()[count - 1]!;
}

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('delivers each event once, signed so that standardwebhooks verifies it, the body the feed item byte for byte', async (t) => {
    const { store, feed, create, clock } = await appOn(t, kind);
    const receiver = await startReceiver(t);
    const endpoint = await addEndpoint(store, receiver.url, ['--description', 'search index']);
    assert.match(endpoint.secret, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.ok(Buffer.from(endpoint.secret.slice(6), 'base64').length >= 24);
    const bodies = [
      await create('{"name":"Rex","categoryId":9223372036854775807}'),
      await create('{"name":"é \\" 😀","categoryId":-9223372036854775808,"status":"sold"}'),
    ];
    const { relay, looked } = testRelay(t, store, { clock });
    const got = await receiver.waitFor(2);
    const verifier = new Webhook(endpoint.secret);
    const items = JSON.parse(await feed()) as { id: string }[];
    const text = await feed();
    // Attempts run side by side: the requests may arrive in either order.
    assert.deepEqual(
      got.map((request) => request.headers['webhook-id']).sort(),
      items.map((item) => item.id),
    );
    for (const request of got) {
      const i = items.findIndex((item) => item.id === request.headers['webhook-id']);
      assert.equal(request.headers['content-type'], 'application/json');
      assert.match(String(request.headers['webhook-timestamp']), /^[0-9]{10}$/);
      verifier.verify(request.body, request.headers as Record<string, string>);
      // The feed's own text of the event: between its id and the next event (or the end).
      const start = text.indexOf(`{"id":"${items[i]!.id}"`);
      const end = i + 1 < items.length ? text.indexOf(`,{"id":"${items[i + 1]!.id}"`) : text.length - 1;
      assert.equal(request.body, text.slice(start, end));
      assert.ok(request.body.endsWith(`"data":${bodies[i]}}`), 'data is the 201 body, every int64 digit kept');
    }
    assert.throws(() =>
      new Webhook(`whsec_${Buffer.alloc(32, 1).toString('base64')}`).verify(
        got[0]!.body,
        got[0]!.headers as Record<string, string>,
      ),
    );
    // An hour on, past any retry, the relay's next look leaves both events alone.
    await until(async () => (await store.webhooks.stats()).waiting === 0, 5000, 'both successes recorded');
    clock.set(clock.now() + 3_600_000);
    relay.wake();
    assert.deepEqual(await looked(), [], 'a success is not sent again');
    assert.equal(receiver.received.length, 2);
    const { out } = await webhooksCli(store, ['list', '--json']);
    const listed = JSON.parse(out[0]!) as { waiting: number; lastSuccessAt: string | null; state: string };
    assert.equal(listed.state, 'enabled');
    assert.equal(listed.waiting, 0);
    assert.notEqual(listed.lastSuccessAt, null);
  });

  it('delivers an endpoint its events in the order the feed lists them when one attempt runs at a time', async (t) => {
    const { store, feed, create, clock } = await appOn(t, kind);
    const receiver = await startReceiver(t);
    await addEndpoint(store, receiver.url);
    for (let i = 0; i < 20; i++) await create(`{"name":"Rex ${i}","categoryId":${i}}`);
    // The clock stands still: every delivery is due at the same instant, handed out 7 at a time,
    // so the order is the relay's own; events created meanwhile join the same instant.
    testRelay(t, store, { clock, batch: 7, env: { PETSTORE_WEBHOOK_CONCURRENCY: '1' } });
    await receiver.waitFor(5);
    for (let i = 20; i < 30; i++) await create(`{"name":"Fido ${i}","categoryId":${i}}`);
    const got = await receiver.waitFor(30);
    const items = JSON.parse(await feed()) as { id: string }[];
    assert.equal(items.length, 30);
    assert.deepEqual(
      got.map((request) => request.headers['webhook-id']),
      items.map((item) => item.id),
    );
  });

  it('keeps the order the feed lists events when a relay stops mid-attempt and the next one takes the attempt over', async (t) => {
    const { store, feed, create, clock } = await appOn(t, kind);
    const receiver = await holdingReceiver(t);
    await addEndpoint(store, receiver.url);
    for (let i = 0; i < 5; i++) await create(`{"name":"Rex ${i}","categoryId":${i}}`);
    const env = { PETSTORE_WEBHOOK_CONCURRENCY: '1' };
    const { relay } = testRelay(t, store, { clock, env });
    await receiver.waitFor(1);
    // The attempt held by the receiver is left leased, due at the same instant as the rest: on
    // SQLite the next relay takes it back as it starts, on PostgreSQL once the lease has expired.
    await relay.stop(0);
    receiver.dropHeld();
    receiver.answer(true);
    clock.set(clock.now() + relayConfig(env).webhookLeaseMs);
    testRelay(t, store, { clock, env });
    const got = await receiver.waitFor(6);
    const items = JSON.parse(await feed()) as { id: string }[];
    assert.deepEqual(
      got.map((request) => request.headers['webhook-id']),
      [items[0]!.id, ...items.map((item) => item.id)],
    );
  });

  it('retries a receiver that fails its first attempts, with growing waits, until it succeeds', async (t) => {
    const { store, create, clock } = await appOn(t, kind);
    const receiver = await startReceiver(
      t,
      (_request, index, response) => void response.writeHead(index < 3 ? 503 : 200).end('busy'),
    );
    const endpoint = await addEndpoint(store, receiver.url);
    await create('{"name":"Rex","categoryId":1}');
    const created = clock.now();
    // 40 ms, 80 ms, 160 ms, each with half of the up to half as much again: 50, 100 and 200 ms.
    const { relay, lines, looked } = testRelay(t, store, {
      clock,
      random: () => 0.5,
      env: { PETSTORE_WEBHOOK_RETRY_MS: '40' },
    });
    for (const [i, due] of [50, 150, 350].entries()) {
      const failed = await failedAttempt(lines, i + 1);
      assert.equal(failed.retryAt, new Date(created + due).toISOString());
      clock.set(created + due - 1);
      relay.wake();
      assert.deepEqual(await looked(), [], `attempt ${i + 2} is not made a millisecond early`);
      clock.set(created + due);
      relay.wake();
    }
    const got = await receiver.waitFor(4);
    const ids = new Set(got.map((r) => r.headers['webhook-id']));
    assert.equal(ids.size, 1, 'the same event each time');
    await until(async () => (await attemptsOf(store, endpoint.id)).length === 4, 5000, 'the success recorded');
    clock.set(created + 3_600_000);
    relay.wake();
    assert.deepEqual(await looked(), [], 'a success is not sent again');
    assert.equal(receiver.received.length, 4);
    const failed = lines.filter((line) => line.msg === 'webhook attempt failed; retrying');
    assert.equal(failed.length, 3, 'one log line per failed attempt');
    assert.ok(!JSON.stringify(lines).includes(endpoint.secret.slice(6)), 'no secret logged');
    const attempts = await attemptsOf(store, endpoint.id);
    assert.deepEqual(
      attempts.map((a) => [a.attempt, a.status, Date.parse(a.at) - created]),
      [
        [4, 200, 350],
        [3, 503, 150],
        [2, 503, 50],
        [1, 503, 0],
      ],
    );
    assert.equal(attempts[0]!.error, null);
    assert.equal(attempts[1]!.error, 'HTTP 503');
    const table = (await webhooksCli(store, ['deliveries', String(endpoint.id)])).out;
    assert.equal(table[0], 'EVENT\tATTEMPT\tAT\tRESULT\tDURATION');
    assert.match(table[1]!, /^evt_[0-9a-f]{32}\t4\t[0-9T:.Z-]+\tHTTP 200\t[0-9]+ ms$/);
    assert.match(table[2]!, /^evt_[0-9a-f]{32}\t3\t[0-9T:.Z-]+\tHTTP 503\t[0-9]+ ms$/);
  });

  it('never follows a redirect: a 3xx is a failed attempt, and the target is never called', async (t) => {
    const { store, create } = await appOn(t, kind);
    const target = await startReceiver(t);
    const receiver = await startReceiver(
      t,
      (_request, _index, response) => void response.writeHead(307, { location: target.url }).end(),
    );
    const endpoint = await addEndpoint(store, receiver.url);
    await create('{"name":"Rex","categoryId":1}');
    testRelay(t, store, { env: { PETSTORE_WEBHOOK_RETRY_MS: '10000' } });
    await receiver.waitFor(1);
    // The outcome is written once the attempt is over, a redirect it followed included.
    await until(async () => (await attemptsOf(store, endpoint.id)).length > 0, 5000, 'the attempt recorded');
    assert.equal(target.received.length, 0);
    const [attempt] = await attemptsOf(store, endpoint.id);
    assert.equal(attempt!.status, 307);
    assert.match(String(attempt!.error), /redirect/);
  });

  it('checks the URL policy again before each attempt: an http host no longer allowed is not called', async (t) => {
    const { store, create } = await appOn(t, kind);
    const receiver = await startReceiver(t);
    const endpoint = await addEndpoint(store, receiver.url);
    await create('{"name":"Rex","categoryId":1}');
    const { relay } = testRelay(t, store, { env: { PETSTORE_WEBHOOK_ALLOW_HTTP: 'localhost' } });
    for (let i = 0; i < 100; i++) {
      const { out } = await webhooksCli(store, ['deliveries', String(endpoint.id), '--json']);
      if (out.length > 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await relay.stop(100);
    assert.equal(receiver.received.length, 0);
    const { out } = await webhooksCli(store, ['deliveries', String(endpoint.id), '--json']);
    const attempt = JSON.parse(out[0]!) as { status: number | null; error: string };
    assert.equal(attempt.status, null);
    assert.match(attempt.error, /^URL refused: only https:\/\/ URLs are allowed/);
  });

  it('signs with the old and the new secret during a roll, with the new one alone after the grace', async (t) => {
    const { store, create } = await appOn(t, kind);
    const receiver = await startReceiver(t);
    const endpoint = await addEndpoint(store, receiver.url);
    const rolled = await webhooksCli(store, ['roll', String(endpoint.id), '--grace', '1h', '--json']);
    assert.equal(rolled.code, 0, rolled.err.join('\n'));
    const { secret } = JSON.parse(rolled.out[0]!) as { secret: string };
    assert.notEqual(secret, endpoint.secret);
    await create('{"name":"Rex","categoryId":1}');
    testRelay(t, store);
    const [first] = await receiver.waitFor(1);
    const headers = first!.headers as Record<string, string>;
    assert.equal(headers['webhook-signature']!.split(' ').length, 2);
    new Webhook(endpoint.secret).verify(first!.body, headers);
    new Webhook(secret).verify(first!.body, headers);

    const again = await webhooksCli(store, ['roll', String(endpoint.id), '--grace', '0', '--json']);
    const { secret: third } = JSON.parse(again.out[0]!) as { secret: string };
    await create('{"name":"Fido","categoryId":2}');
    const [, second] = await receiver.waitFor(2);
    const later = second!.headers as Record<string, string>;
    assert.equal(later['webhook-signature']!.split(' ').length, 1);
    new Webhook(third).verify(second!.body, later);
    assert.throws(() => new Webhook(secret).verify(second!.body, later));
  });

  it('gives an event up after the give-up period and disables an endpoint that failed all of it', async (t) => {
    const { store, create, clock } = await appOn(t, kind);
    const receiver = await startReceiver(t, (_request, _index, response) => void response.writeHead(500).end());
    const endpoint = await addEndpoint(store, receiver.url);
    await create('{"name":"Rex","categoryId":1}');
    const created = clock.now();
    const { relay, lines, looked } = testRelay(t, store, {
      clock,
      random: () => 0,
      env: { PETSTORE_WEBHOOK_GIVE_UP: '1s', PETSTORE_WEBHOOK_RETRY_MS: '100' },
    });
    // Waits of 100, 200 and 400 ms; the next would end past the 1 s give-up period, so the last
    // attempt is made as that ends.
    for (const [i, due] of [100, 300, 700, 1000].entries()) {
      const failed = await failedAttempt(lines, i + 1);
      assert.equal(failed.msg, 'webhook attempt failed; retrying');
      assert.equal(failed.retryAt, new Date(created + due).toISOString());
      clock.set(created + due);
      relay.wake();
    }
    const last = await failedAttempt(lines, 5);
    assert.equal(last.msg, 'webhook attempt failed; the event is given up');
    assert.equal(last.gaveUp, true);
    const disabled = lines.filter((line) => line.level === 'error');
    assert.equal(disabled.length, 1);
    assert.match(String(disabled[0]!.msg), /webhook endpoint disabled/);
    assert.deepEqual(
      (await attemptsOf(store, endpoint.id)).map((a) => [a.attempt, a.status, Date.parse(a.at) - created]),
      [
        [5, 500, 1000],
        [4, 500, 700],
        [3, 500, 300],
        [2, 500, 100],
        [1, 500, 0],
      ],
    );
    assert.equal(receiver.received.length, 5);
    const { out } = await webhooksCli(store, ['list', '--json']);
    const listed = JSON.parse(out[0]!) as { state: string; waiting: number; disabledAt: string | null };
    assert.equal(listed.state, 'disabled');
    assert.equal(listed.disabledAt, new Date(created + 1000).toISOString());
    assert.equal(listed.waiting, 0, 'the event was given up');
    assert.equal((await store.webhooks.stats()).disabled, 1);
    await create('{"name":"Fido","categoryId":1}');
    clock.set(created + 3_600_000);
    relay.wake();
    assert.deepEqual(await looked(), [], 'a disabled endpoint is sent nothing');
    assert.equal(receiver.received.length, 5);

    const enabled = await webhooksCli(store, ['enable', String(endpoint.id)]);
    assert.equal(enabled.code, 0);
    const { out: after } = await webhooksCli(store, ['list', '--json']);
    assert.equal((JSON.parse(after[0]!) as { state: string; waiting: number }).state, 'enabled');
    assert.equal(
      (JSON.parse(after[0]!) as { waiting: number }).waiting,
      0,
      'events from while it was disabled are not owed',
    );
  });
}
