import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { issueKey } from '../src/keys/issue.js';
import type { Scope } from '../src/schemas.js';
import type { Store } from '../src/store/store.js';
import { assertError, manualClock, startApp, type TestApp } from './helpers.js';
import pg from 'pg';
import { openPostgresStore } from '../src/store/postgres.js';
import { createPostgresSchema, storeKinds, type StoreKind, type TestDatabase } from './stores.js';

const NEXT = /^<(\/v1\/events\?limit=([0-9]+)&after=(evt_[0-9a-f]{32}))>; rel="next"$/;

interface FeedEvent {
  id: string;
  type: string;
  createdAt: string;
  data: { id: number; name: string };
}

/** An `inject` with a key that holds `scopes` only. */
async function keyWith(app: TestApp, ...scopes: Scope[]) {
  const { key } = await issueKey(app.store, scopes.join(' '), new Date(app.clock.now()), { scopes });
  return (options: InjectOptions) =>
    app.app.inject({ ...options, headers: { ...options.headers, authorization: `Bearer ${key}` } });
}

/** The service on a fresh database of `kind`, with `read`, an injector holding events:read. */
async function appOn(t: TestContext, kind: StoreKind, database?: TestDatabase) {
  const db = database ?? (await kind.createDatabase(t));
  const clock = manualClock();
  const store = db.open({ clock });
  await store.migrate();
  const app = await startApp(t, { store, clock });
  return { ...app, database: db, read: await keyWith(app, 'events:read') };
}

/**
 * Creates `count` pets and waits until the feed lists their events: on PostgreSQL an event is
 * listed once every older transaction on the server has ended (docs/events.md#ordering), and
 * other clients of the test server may hold one open for a moment.
 */
async function seed(store: Store, count: number) {
  for (let i = 0; i < count; i++) await store.createPet({ name: `Pet ${i}`, categoryId: BigInt(i), status: 'sold' });
  for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
    const listed = await store.listEvents({ limit: count });
    if (listed.length === count) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`the ${count} events were not listed within 10 s`);
}

/** The next page's URL from a rel="next" link, checked; undefined without one. */
function nextLink(response: LightMyRequestResponse): string | undefined {
  const link = response.headers.link;
  if (link === undefined) return undefined;
  const match = NEXT.exec(String(link));
  assert.ok(match, `not a rel="next" link to the feed: ${String(link)}`);
  return match[1];
}

/**
 * Follows rel="next" from `url` while it is given; at the end of the feed, asks again with the
 * last id seen until `done(number seen)` and the feed has nothing more, or 30 s pass.
 */
async function follow(
  read: (o: InjectOptions) => Promise<LightMyRequestResponse>,
  url: string,
  done: (seen: number) => boolean = () => true,
) {
  const seen: FeedEvent[] = [];
  const pages: number[] = [];
  let current = url;
  for (const deadline = Date.now() + 30_000; Date.now() < deadline;) {
    const response = await read({ method: 'GET', url: current });
    assert.equal(response.statusCode, 200, `${current}: ${response.body}`);
    const page = response.json() as FeedEvent[];
    seen.push(...page);
    pages.push(page.length);
    const next = nextLink(response);
    if (next) {
      current = next;
      continue;
    }
    const last = seen.at(-1)?.id;
    if (last)
      current = `/v1/events?limit=${new URL(current, 'http://x').searchParams.get('limit') ?? 20}&after=${last}`;
    const finished = done(seen.length);
    if (page.length === 0 && finished) return { seen, pages };
    if (page.length === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  throw new Error('the feed did not end within 30 s');
}

const ascending = (ids: string[]) => ids.every((id, i) => i === 0 || ids[i - 1]! < id);

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('an empty feed is an empty array without Link', async (t) => {
    const { read } = await appOn(t, kind);
    const response = await read({ method: 'GET', url: '/v1/events' });
    assert.equal(response.statusCode, 200);
    assert.match(String(response.headers['content-type']), /^application\/json; charset=utf-8$/);
    assert.equal(response.body, '[]');
    assert.equal(response.headers.link, undefined);
  });

  it('pages of 20 by default, oldest first, with Link only while more follow; every event once', async (t) => {
    const { read, store } = await appOn(t, kind);
    await seed(store, 45);
    const { seen, pages } = await follow(read, '/v1/events');
    assert.deepEqual(pages.slice(0, 3), [20, 20, 5]);
    assert.deepEqual(
      seen.map((event) => event.data.name),
      Array.from({ length: 45 }, (_, i) => `Pet ${i}`),
    );
    assert.ok(ascending(seen.map((event) => event.id)), 'ids increase in list order');
    for (const event of seen) {
      assert.deepEqual(Object.keys(event), ['id', 'type', 'createdAt', 'data']);
      assert.equal(event.type, 'pet.created');
    }
  });

  it('honours limit from 1 to 100, and a page that ends at the last event has no Link', async (t) => {
    const { read, store } = await appOn(t, kind);
    await seed(store, 101);
    for (const limit of [1, 7, 100]) {
      const response = await read({ method: 'GET', url: `/v1/events?limit=${limit}` });
      assert.equal(response.json().length, limit);
      const next = nextLink(response)!;
      assert.equal(NEXT.exec(`<${next}>; rel="next"`)![2], String(limit));
      assert.equal(NEXT.exec(`<${next}>; rel="next"`)![3], response.json().at(-1).id);
    }
    const all = (await read({ method: 'GET', url: '/v1/events?limit=100' })).json() as FeedEvent[];
    const tail = await read({ method: 'GET', url: `/v1/events?limit=1&after=${all[99]!.id}` });
    assert.equal(tail.json().length, 1);
    assert.equal(tail.headers.link, undefined);
    const after = await read({ method: 'GET', url: `/v1/events?after=${all[49]!.id}&limit=100` });
    assert.deepEqual(
      (after.json() as FeedEvent[]).map((event) => event.id),
      [...all.slice(50), tail.json()[0]].map((event) => event.id),
    );
  });

  it('HEAD answers as GET, with the same status and Link and no body', async (t) => {
    const { read, store } = await appOn(t, kind);
    await seed(store, 3);
    const get = await read({ method: 'GET', url: '/v1/events?limit=2' });
    const head = await read({ method: 'HEAD', url: '/v1/events?limit=2' });
    assert.equal(head.statusCode, 200);
    assert.equal(head.body, '');
    assert.equal(head.headers.link, get.headers.link);
    assert.equal(head.headers['content-type'], get.headers['content-type']);
  });

  it('401 without a key, 403 for a key without events:read (the default), 405 for POST', async (t) => {
    const app = await appOn(t, kind);
    assertError(await app.app.inject({ method: 'GET', url: '/v1/events' }), 401, 'unauthorized');
    // startApp's key was issued without --scope: pets:read, pets:write and metrics:read.
    for (const url of ['/v1/events', '/v1/events?limit=0&bogus=1']) {
      const refused = await app.call({ method: 'GET', url });
      assertError(refused, 403, 'forbidden', 'events:read');
      assert.equal(
        refused.headers['www-authenticate'],
        'Bearer realm="petstore", error="insufficient_scope", scope="events:read"',
      );
    }
    const head = await app.call({ method: 'HEAD', url: '/v1/events' });
    assert.equal(head.statusCode, 403);
    assert.equal(head.body, '');
    const reader = app.read;
    assertError(await reader({ method: 'GET', url: '/v1/pets' }), 403, 'forbidden', 'pets:read');
    const posted = await reader({ method: 'POST', url: '/v1/events', payload: {} });
    assertError(posted, 405, 'method_not_allowed');
    assert.equal(posted.headers.allow, 'GET, HEAD');
  });

  it('400 naming the parameter: invalid limit or after, repeated or unknown parameters', async (t) => {
    const { read, store } = await appOn(t, kind);
    await seed(store, 2);
    const id = ((await read({ method: 'GET', url: '/v1/events' })).json() as FeedEvent[])[0]!.id;
    const cases: [string, string][] = [
      ...['0', '101', 'abc', '1.5', '05', '', '-1', '+5', '1e1', '99999999999999999999'].map(
        (limit): [string, string] => [`limit=${limit}`, 'limit'],
      ),
      ...[
        'evt_1',
        'evt_',
        '42',
        id.toUpperCase(),
        `${id}0`,
        id.slice(0, -1),
        id.replace('evt_', 'evt-'),
        // A sequence number past int64: no event could have it.
        `evt_${'0'.repeat(16)}${'f'.repeat(16)}`,
        '',
      ].map((after): [string, string] => [`after=${encodeURIComponent(after)}`, 'after']),
      [`after=${id}&after=${id}`, 'after'],
      ['limit=5&limit=5', 'limit'],
      ['cursor=abc', 'cursor'],
      ['status=sold', 'status'],
      ['__proto__=1', '__proto__'],
    ];
    for (const [query, name] of cases) {
      try {
        assertError(await read({ method: 'GET', url: `/v1/events?${query}` }), 400, 'invalid_request', name);
      } catch (error) {
        throw new Error(`${query}: ${(error as Error).message}`, { cause: error });
      }
    }
  });
}

test("the feed counts against the key's rate limit like any operation: past it, 429 with Retry-After", async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: '2' } });
  const read = await keyWith(app, 'events:read');
  assert.equal((await read({ method: 'GET', url: '/v1/events' })).statusCode, 200);
  assert.equal((await read({ method: 'GET', url: '/v1/events' })).statusCode, 200);
  const refused = await read({ method: 'GET', url: '/v1/events' });
  assertError(refused, 429, 'rate_limited');
  assert.match(String(refused.headers['retry-after']), /^[1-9][0-9]*$/);
  assert.match(String(refused.headers.ratelimit), /^"default";r=0;/);
});

test(
  'PostgreSQL: while a transaction that wrote an event is open, later events wait, so none is skipped',
  { skip: storeKinds[1]!.skip },
  async (t) => {
    const url = await createPostgresSchema(t);
    const store = openPostgresStore(url);
    t.after(() => store.close());
    await store.migrate();
    const held = new pg.Client({ connectionString: url });
    await held.connect();
    t.after(() => held.end());
    // As a create with an Idempotency-Key does: its event (the lower sequence number) is written,
    // and the transaction goes on before it commits.
    await held.query('BEGIN');
    try {
      await held.query(
        'INSERT INTO events (tx, type, created_at, data) ' +
          `SELECT pg_current_xact_id()::text::bigint + tx_offset, 'pet.created', now(), '{"held":true}' FROM event_clock`,
      );
      const later = await store.createPet({ name: 'Later', categoryId: 1n, status: 'sold' });
      // Listing the later event now would make a reader that follows the feed skip the held one.
      assert.deepEqual(await store.listEvents({ limit: 10 }), []);
      await held.query('COMMIT');
      let listed = await store.listEvents({ limit: 10 });
      for (const deadline = Date.now() + 10_000; listed.length < 2 && Date.now() < deadline;) {
        await new Promise((resolve) => setTimeout(resolve, 20));
        listed = await store.listEvents({ limit: 10 });
      }
      assert.deepEqual(
        listed.map((event) => event.data),
        ['{"held":true}', `{"id":${later.id},"name":"Later","categoryId":1,"status":"sold"}`],
      );
    } finally {
      // A failed assertion leaves it open, and it would keep the schema from being dropped.
      await held.query('ROLLBACK').catch(() => {});
    }
  },
);

test(
  'PostgreSQL: after a restore into a server with lower transaction ids, new events still follow the restored ones',
  { skip: storeKinds[1]!.skip },
  async (t) => {
    const url = await createPostgresSchema(t);
    const before = openPostgresStore(url);
    t.after(() => before.close());
    await before.migrate();
    for (const name of ['A', 'B', 'C']) await before.createPet({ name, categoryId: 1n, status: 'sold' });
    await before.close();
    // What pg_dump and a restore into a younger server leave: the events' transaction ids far
    // ahead of the server's own.
    const admin = new pg.Client({ connectionString: url });
    await admin.connect();
    t.after(() => admin.end());
    await admin.query('UPDATE events SET tx = tx + 1000000000000');
    const restored = (await admin.query<{ tx: string; seq: string }>('SELECT tx, seq FROM events ORDER BY tx, seq'))
      .rows;
    const last = { tx: BigInt(restored[2]!.tx), seq: BigInt(restored[2]!.seq) };

    // The service starts on the restored database (serve migrates first), and goes on writing.
    const after = openPostgresStore(url);
    t.after(() => after.close());
    assert.deepEqual(await after.migrate(), []);
    const d = await after.createPet({ name: 'D', categoryId: 1n, status: 'sold' });
    let listed = await after.listEvents({ limit: 10 });
    for (const deadline = Date.now() + 10_000; listed.length < 4 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      listed = await after.listEvents({ limit: 10 });
    }
    assert.deepEqual(
      listed.map((event) => JSON.parse(event.data).name),
      ['A', 'B', 'C', 'D'],
    );
    // A reader that had read up to C before the restore goes on with D.
    assert.deepEqual(
      (await after.listEvents({ after: last, limit: 10 })).map((event) => event.data),
      [`{"id":${d.id},"name":"D","categoryId":1,"status":"sold"}`],
    );
    // Starting again moves the clock forward (to the present, or past the stored events), never
    // back: the next event follows D.
    const offset = BigInt((await admin.query('SELECT tx_offset FROM event_clock')).rows[0].tx_offset);
    await after.migrate();
    assert.ok(BigInt((await admin.query('SELECT tx_offset FROM event_clock')).rows[0].tx_offset) >= offset);
    const e = await after.createPet({ name: 'E', categoryId: 1n, status: 'sold' });
    let next = await after.listEvents({ after: listed[3]!.position, limit: 10 });
    for (const deadline = Date.now() + 10_000; next.length < 1 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 20));
      next = await after.listEvents({ after: listed[3]!.position, limit: 10 });
    }
    assert.deepEqual(
      next.map((event) => event.data),
      [`{"id":${e.id},"name":"E","categoryId":1,"status":"sold"}`],
    );
  },
);

test(
  'PostgreSQL: following the links while three instances create pets and others start (moving the event clock) visits every event once, in order',
  { skip: storeKinds[1]!.skip },
  async (t) => {
    const kind = storeKinds[1]!;
    const reader = await appOn(t, kind);
    const writers = await Promise.all([0, 1, 2].map(async () => (await appOn(t, kind, reader.database)).call));
    let writing = true;
    // Instances starting one after another meanwhile, each moving the clock as it migrates.
    const starts = (async () => {
      for (let i = 0; writing && i < 50; i++) {
        const starting = reader.database.open();
        await starting.migrate();
        await starting.close();
      }
    })();
    try {
      await followWhileWriting(writers, reader.read);
    } finally {
      writing = false;
      await starts;
    }
  },
);

test('SQLite: following the links while three writers create pets visits every event once, in order', async (t) => {
  const { read, call } = await appOn(t, storeKinds[0]!);
  await followWhileWriting([call, call, call], read);
});

test(
  'PostgreSQL: following the links while three instances create pets visits every event once, in order',
  { skip: storeKinds[1]!.skip },
  async (t) => {
    const kind = storeKinds[1]!;
    const reader = await appOn(t, kind);
    // Four instances of the service on one database: three writers, one reader.
    const writers = await Promise.all([0, 1, 2].map(async () => (await appOn(t, kind, reader.database)).call));
    await followWhileWriting(writers, reader.read);
  },
);

/**
 * Three writers create pets, several requests in flight each (so creates are batched), while the
 * feed is followed page by page; once they are done, every 201 must have been listed exactly
 * once, with its data, and ids must have increased throughout.
 */
async function followWhileWriting(
  writers: ((o: InjectOptions) => Promise<LightMyRequestResponse>)[],
  read: (o: InjectOptions) => Promise<LightMyRequestResponse>,
) {
  const PER_WRITER = 160;
  const IN_FLIGHT = 8;
  const acknowledged: string[] = [];
  let writing = true;
  const write = async (call: (o: InjectOptions) => Promise<LightMyRequestResponse>, w: number) => {
    for (let i = 0; i < PER_WRITER; i += IN_FLIGHT) {
      const answers = await Promise.all(
        Array.from({ length: IN_FLIGHT }, (_, j) =>
          call({ method: 'POST', url: '/v1/pets', payload: { name: `w${w}-${i + j}`, categoryId: i + j } }),
        ),
      );
      for (const answer of answers) {
        assert.equal(answer.statusCode, 201, answer.body);
        acknowledged.push(answer.body);
      }
    }
  };
  const writes = Promise.all(writers.map((call, w) => write(call, w))).finally(() => (writing = false));
  // Once the writers are done and every 201 is listed: on PostgreSQL an event may be listed a
  // moment after its 201, while an older transaction on the server (another test's) still runs.
  const followed = follow(read, '/v1/events?limit=5', (seen) => !writing && seen >= acknowledged.length);
  await writes;
  const { seen } = await followed;
  const ids = seen.map((event) => event.id);
  assert.equal(new Set(ids).size, ids.length, 'no event listed twice');
  assert.ok(ascending(ids), 'ids increase in list order');
  const listed = seen.map((event) => JSON.stringify(event.data));
  assert.equal(listed.length, writers.length * PER_WRITER);
  assert.deepEqual(listed.sort(), acknowledged.sort());
}
