import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { eventRowsSql } from '../bench/seed.js';
import { runWebhooksCommand } from '../src/cli/webhooks.js';
import type { Clock } from '../src/clock.js';
import { formatEventId } from '../src/events/ids.js';
import { HORIZON } from '../src/store/postgres-event-clock.js';
import type { Store } from '../src/store/store.js';
import { manualClock } from './helpers.js';
import { storeKinds, type TestDatabase } from './stores.js';
import { addEndpoint, holdingReceiver, startReceiver, testRelay, until, webhooksCli } from './webhooks.js';

const T0 = Date.UTC(2026, 10, 22, 10);

/**
 * `petstore webhooks …` in process, as another process would run it: on a store of its own on
 * `database` (the service's relay runs on another), closed after; `now` the command's clock.
 */
async function command(
  database: TestDatabase,
  args: string[],
  { now, timeoutMs = 2000, allowHttp = ['127.0.0.1'] }: { now?: Clock; timeoutMs?: number; allowHttp?: string[] } = {},
) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runWebhooksCommand(args, {
    io: { out: (line) => out.push(line), err: (line) => err.push(line) },
    async withStore(run) {
      const store = database.open();
      try {
        await store.migrate();
        return await run(store);
      } finally {
        await store.close();
      }
    },
    allowHttp: () => allowHttp,
    timeoutMs: () => timeoutMs,
    now: now && (() => new Date(now.now())),
  });
  return { code, out, err };
}

/** The events the feed lists, oldest first. */
const feed = async (store: Store) => store.listEvents({ limit: 100 });

/** Creates `names` as pets and waits until the feed lists their events (PostgreSQL: once older transactions end). */
async function createPets(store: Store, names: string[]) {
  const before = (await feed(store)).length;
  for (const name of names) await store.createPet({ name, categoryId: 1n, status: 'available' });
  await until(async () => (await feed(store)).length === before + names.length);
  return (await feed(store)).slice(before).map((event) => formatEventId(event.position));
}

const idsOf = (received: { headers: Record<string, unknown> }[]) => received.map((r) => r.headers['webhook-id']);

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('webhooks test sends one signed webhook.test event, not in the feed and not retried, and prints the status and time', async (t) => {
    const database = await kind.migratedDatabase(t);
    const store = database.open();
    await store.migrate();
    let answer = 204;
    const receiver = await startReceiver(t, (_request, _index, response) => void response.writeHead(answer).end());
    const endpoint = await addEndpoint(store, receiver.url);

    const sent = await command(database, ['test', String(endpoint.id)]);
    assert.equal(sent.code, 0, sent.err.join('\n'));
    assert.match(sent.out[0]!, /^HTTP 204 in [0-9]+ ms$/);
    const [request] = await receiver.waitFor(1);
    const event = new Webhook(endpoint.secret).verify(request!.body, request!.headers as Record<string, string>) as {
      id: string;
    };
    assert.match(event.id, /^evt_test_[0-9a-f]{32}$/);
    assert.equal(request!.headers['webhook-id'], event.id);
    assert.deepEqual(JSON.parse(request!.body), {
      id: event.id,
      type: 'webhook.test',
      createdAt: JSON.parse(request!.body).createdAt,
      data: {},
    });
    assert.ok(sent.err.join('\n').includes(event.id));

    // During a roll's grace both secrets sign it, as every delivery.
    const rolled = await webhooksCli(store, ['roll', String(endpoint.id), '--json']);
    const { secret } = JSON.parse(rolled.out[0]!) as { secret: string };
    answer = 500;
    const failed = await command(database, ['test', String(endpoint.id), '--json']);
    assert.equal(failed.code, 1);
    const line = JSON.parse(failed.out[0]!) as Record<string, unknown>;
    assert.deepEqual(Object.keys(line), ['id', 'eventId', 'ok', 'status', 'error', 'durationMs']);
    assert.deepEqual([line.id, line.ok, line.status, line.error], [endpoint.id, false, 500, 'HTTP 500']);
    assert.equal(typeof line.durationMs, 'number');
    const [, second] = await receiver.waitFor(2);
    const headers = second!.headers as Record<string, string>;
    assert.equal(headers['webhook-signature']!.split(' ').length, 2);
    new Webhook(endpoint.secret).verify(second!.body, headers);
    new Webhook(secret).verify(second!.body, headers);
    assert.equal(headers['webhook-id'], line.eventId);

    // Neither is in the feed, the endpoint's attempts or its deliveries: a relay finds nothing to send.
    const { looked } = testRelay(t, store);
    assert.deepEqual(await looked(), []);
    assert.deepEqual(await looked(), []);
    assert.equal(receiver.received.length, 2, 'the failed test is not retried');
    assert.deepEqual(await feed(store), []);
    assert.deepEqual(await store.webhooks.listAttempts(endpoint.id, 100), []);
  });

  it('webhooks test honours the URL policy and PETSTORE_WEBHOOK_TIMEOUT_MS, and refuses an unknown id', async (t) => {
    const database = await kind.migratedDatabase(t);
    const store = database.open();
    await store.migrate();
    const receiver = await holdingReceiver(t);
    const endpoint = await addEndpoint(store, receiver.url);

    const refused = await command(database, ['test', String(endpoint.id)], { allowHttp: [] });
    assert.equal(refused.code, 1);
    assert.match(refused.out[0]!, /^failed: URL refused: only https:\/\/ URLs are allowed; .* in 0 ms$/);
    const late = await command(database, ['test', String(endpoint.id), '--json'], { timeoutMs: 200 });
    assert.equal(late.code, 1);
    const line = JSON.parse(late.out[0]!) as { status: number | null; error: string; durationMs: number };
    assert.deepEqual([line.status, line.error], [null, 'no answer within 200 ms']);
    assert.ok(line.durationMs >= 200 && line.durationMs < 2000, `${line.durationMs} ms`);
    assert.equal(receiver.received.length, 1, 'the refused URL was not sent to');

    const unknown = await command(database, ['test', '4242']);
    assert.deepEqual([unknown.code, unknown.out], [1, []]);
    assert.match(unknown.err.join('\n'), /No webhook endpoint has id 4242/);
    const usage = await command(database, ['test']);
    assert.equal(usage.code, 2);
  });

  it('webhooks resend makes one kept event due again, and the relay sends it with the same webhook-id', async (t) => {
    const database = await kind.migratedDatabase(t);
    // Now: the receiver's library refuses a timestamp 5 minutes away.
    const clock = manualClock(Date.now());
    const store = database.open({ clock });
    await store.migrate();
    let failing = false;
    const receiver = await startReceiver(t, (_r, _i, response) => void response.writeHead(failing ? 500 : 204).end());
    const endpoint = await addEndpoint(store, receiver.url);
    const ids = await createPets(store, ['Rex', 'Tom']);
    const { looked } = testRelay(t, store, { clock });
    await until(async () => (await store.webhooks.listAttempts(endpoint.id, 10))!.length === 2);

    const resent = await command(database, ['resend', String(endpoint.id), ids[0]!], { now: clock });
    assert.equal(resent.code, 0, resent.err.join('\n'));
    assert.deepEqual(resent.out, []);
    assert.match(resent.err[0]!, /is due again for webhook endpoint [0-9]+: the service's relay sends it/);
    await receiver.waitFor(3);
    assert.deepEqual(idsOf(receiver.received).sort(), [ids[0], ids[0], ids[1]].sort());
    const again = receiver.received[2]!;
    new Webhook(endpoint.secret).verify(again.body, again.headers as Record<string, string>);
    assert.equal(JSON.parse(again.body).data.name, 'Rex');

    // A retry waiting (the clock stands still, so it is not due) is made due now, not doubled.
    failing = true;
    const [third] = await createPets(store, ['Kit']);
    await until(async () => (await store.webhooks.listAttempts(endpoint.id, 10))!.length === 4);
    failing = false;
    assert.deepEqual(await looked(), [], 'the retry waits for its time');
    const waiting = await command(database, ['resend', String(endpoint.id), third!], { now: clock });
    assert.equal(waiting.code, 0);
    assert.match(waiting.err[0]!, /was waiting for webhook endpoint [0-9]+ \(a retry\); it is due now/);
    await receiver.waitFor(5);
    assert.deepEqual(idsOf(receiver.received.slice(3)), [third, third]);
    await looked();
    assert.deepEqual(await looked(), [], 'sent once');
  });

  if (kind.name === 'PostgreSQL') {
    it('webhooks resend and replay wake the running relays: what they make due is sent with no timer to wait for', async (t) => {
      const database = await kind.migratedDatabase(t);
      const store = database.open();
      await store.migrate();
      const receiver = await startReceiver(t);
      const endpoint = await addEndpoint(store, receiver.url);
      const ids = await createPets(store, ['Rex', 'Tom']);
      // Far longer than the test: only a wake makes the relay look again.
      const { looked } = testRelay(t, store, { pollMs: 600_000 });
      await receiver.waitFor(2, 5000);
      await looked();
      const resent = await command(database, ['resend', String(endpoint.id), ids[0]!]);
      assert.equal(resent.code, 0, resent.err.join('\n'));
      await receiver.waitFor(3, 2000);
      const replayed = await command(database, ['replay', String(endpoint.id), '--since', ids[0]!]);
      assert.equal(replayed.code, 0, replayed.err.join('\n'));
      await receiver.waitFor(4, 2000);
      assert.deepEqual(idsOf(receiver.received.slice(2)), [ids[0], ids[1]]);
    });
  }

  it('webhooks resend and replay refuse an unknown endpoint, a disabled one, and an event that is not kept, with one line', async (t) => {
    const database = await kind.migratedDatabase(t);
    const clock = manualClock(T0);
    const store = database.open({ clock });
    await store.migrate();
    const endpoint = await addEndpoint(store, 'http://127.0.0.1:9/hook');
    const [first, second] = await createPets(store, ['Rex', 'Tom']);
    const id = String(endpoint.id);
    const refusals: [string[], RegExp][] = [
      [['resend', '4242', first!], /^No webhook endpoint has id 4242; /],
      [['replay', '4242', '--since', first!], /^No webhook endpoint has id 4242; /],
      [
        ['resend', id, formatEventId({ tx: 2n ** 62n, seq: 7n })],
        /^No event has id evt_[0-9a-f]{32}; nothing was sent/,
      ],
      [['replay', id, '--since', formatEventId({ tx: 2n ** 62n, seq: 7n })], /^No event has id /],
    ];
    for (const [args, message] of refusals) {
      const { code, out, err } = await command(database, args, { now: clock });
      assert.deepEqual([code, out, err.length], [1, [], 1], args.join(' '));
      assert.match(err[0]!, message, args.join(' '));
    }
    // Retention deletes the oldest event: it is no longer kept.
    clock.set(T0 + 60_000);
    await store.createPet({ name: 'Kit', categoryId: 1n, status: 'available' });
    await database.execute('DELETE FROM events WHERE created_at < (SELECT max(created_at) FROM events)');
    for (const args of [
      ['resend', id, first!],
      ['replay', id, '--since', second!],
    ]) {
      const { code, err } = await command(database, args, { now: clock });
      assert.deepEqual([code, err.length], [1, 1], args.join(' '));
      assert.match(err[0]!, /^Event evt_[0-9a-f]{32} is no longer kept: it was deleted after PETSTORE_EVENT_RETENTION/);
    }
    await database.execute(`UPDATE webhook_endpoints SET disabled_at = ${T0}`);
    for (const args of [
      ['resend', id, first!],
      ['replay', id, '--since', '2026-11-22T00:00:00Z'],
    ]) {
      const { code, err } = await command(database, args, { now: clock });
      assert.deepEqual(
        [code, err],
        [
          1,
          [`Webhook endpoint ${id} is disabled: enable it first ('petstore webhooks enable ${id}'); nothing was sent.`],
        ],
      );
    }
    const usages: [string[], RegExp][] = [
      [['resend', id], /needs the one numeric id/],
      [['resend', id, 'evt_test_00'], /<event-id> must be an event id, evt_ and 32 hexadecimal digits/],
      [['replay', id], /webhooks replay needs --since/],
      [['replay', id, '--since', 'yesterday'], /--since must be an event id .* or an RFC 3339 instant/],
    ];
    for (const [args, message] of usages) {
      const { code, err } = await command(database, args);
      assert.equal(code, 2, args.join(' '));
      assert.match(err.join('\n'), message);
    }
    assert.equal(await database.scalar('SELECT count(*) FROM webhook_deliveries'), 0, 'nothing was made due');
  });

  it('webhooks replay --since an event or an instant makes every kept event after it due, oldest first, none doubled', async (t) => {
    const database = await kind.migratedDatabase(t);
    const clock = manualClock(T0);
    const store = database.open({ clock });
    await store.migrate();
    let failing = false;
    const receiver = await startReceiver(t, (_r, _i, response) => void response.writeHead(failing ? 500 : 204).end());
    const endpoint = await addEndpoint(store, receiver.url);
    const ids: string[] = [];
    for (const [i, name] of ['A', 'B', 'C', 'D'].entries()) {
      clock.set(T0 + i * 3_600_000);
      ids.push(...(await createPets(store, [name])));
    }
    const relay = testRelay(t, store, { clock, env: { PETSTORE_WEBHOOK_CONCURRENCY: '1' } });
    await receiver.waitFor(4);
    // E's first attempt fails: it waits for its retry. Then the relay stops, and F is written:
    // the endpoint has not been handed it yet.
    failing = true;
    const [e] = await createPets(store, ['E']);
    await until(async () => (await store.webhooks.listAttempts(endpoint.id, 10))!.length === 5);
    await relay.relay.stop();
    failing = false;
    const [f] = await createPets(store, ['F']);

    const replayed = await command(database, ['replay', String(endpoint.id), '--since', ids[1]!], { now: clock });
    assert.equal(replayed.code, 0, replayed.err.join('\n'));
    assert.deepEqual(replayed.out, ['2'], 'C and D');
    assert.match(
      replayed.err[0]!,
      /^Made 2 kept events after evt_[0-9a-f]{32} due again .*; 2 more were already waiting for it\./,
    );
    const instant = await command(database, ['replay', String(endpoint.id), '--since', '2026-11-22T11:00:00Z'], {
      now: clock,
    });
    assert.deepEqual(instant.out, ['1'], 'B: C and D are waiting already');
    assert.match(instant.err[0]!, /^Made 1 kept event created since 2026-11-22T11:00:00\.000Z due again .*; 4 more/);

    const before = receiver.received.length;
    const { looked } = testRelay(t, store, { clock, env: { PETSTORE_WEBHOOK_CONCURRENCY: '1' } });
    await receiver.waitFor(before + 4);
    await looked();
    assert.deepEqual(await looked(), [], "E's retry is not due yet (the clock stands still), and nothing else is sent");
    const sent = idsOf(receiver.received.slice(before));
    assert.deepEqual([...sent].sort(), [ids[1], ids[2], ids[3], f].sort(), 'each once');
    assert.ok(sent.indexOf(ids[2]) < sent.indexOf(ids[3]), 'a replay sends oldest first');
    assert.ok(!sent.includes(e));
  });

  it('webhooks replay of ten thousand kept events makes each due once, in batches, however often it is run', async (t) => {
    const database = await kind.migratedDatabase(t);
    const store = database.open();
    await store.migrate();
    const EVENTS = 10_000;
    await database.execute(eventRowsSql(kind.name, EVENTS, '2026-11-22T09:00:00.000Z'));
    // Added after them: it was handed none of them, and none waits for it. (On PostgreSQL, once
    // the feed lists them: a transaction another test holds open on the server may hold them
    // back a moment, and an endpoint added meanwhile would start before them.)
    if (kind.name === 'PostgreSQL') {
      const listed = async () => Number(await database.scalar(`SELECT count(*) FROM events WHERE tx < ${HORIZON}`));
      await until(async () => (await listed()) === EVENTS, 10_000, 'the events listed');
    }
    const endpoint = await addEndpoint(store, 'http://127.0.0.1:9/hook');
    const args = ['replay', String(endpoint.id), '--since', '2026-11-22T09:00:00Z'];
    const first = await command(database, args, { now: manualClock(T0) });
    assert.deepEqual([first.code, first.out], [0, [String(EVENTS)]], first.err.join('\n'));
    assert.equal(await database.scalar('SELECT count(*) FROM webhook_deliveries'), EVENTS);
    assert.equal(await database.scalar('SELECT count(DISTINCT seq) FROM webhook_deliveries'), EVENTS);
    const again = await command(database, args, { now: manualClock(T0) });
    assert.deepEqual(again.out, ['0']);
    assert.match(again.err[0]!, new RegExp(`; ${EVENTS} more were already waiting for it\\.`));
    assert.equal(await database.scalar('SELECT count(*) FROM webhook_deliveries'), EVENTS);
    const listed = (await store.webhooks.listEndpoints())[0]!;
    assert.equal(listed.waiting, EVENTS);
  });
}
