import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import pg from 'pg';
import { buildApp } from '../src/app.js';
import { issueKey } from '../src/keys/issue.js';
import { openPostgresStore } from '../src/store/postgres.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import type { Store } from '../src/store/store.js';
import { tempFolder } from './helpers.js';
import { runDatabase } from './in-process.js';
import { forLibpq, missingPgTools, runPgTool } from './pg-tools.js';
import { createPostgresSchema, POSTGRES_URL } from './stores.js';
import { addEndpoint, relayConfig, startReceiver, testRelay, until } from './webhooks.js';

interface FeedEvent {
  id: string;
  data: { id: number; name: string };
}

/**
 * The service on `store` (the app and its relay), as `serve` runs it, with a key that creates
 * pets and reads the feed; `stop` ends both, so the database can be restored.
 */
async function serveOn(t: TestContext, store: Store) {
  const app = await buildApp({ config: relayConfig(), store, logger: false });
  const { relay } = testRelay(t, store);
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await relay.stop(500);
    await app.close();
  };
  t.after(stop);
  const { key } = await issueKey(store, 'test', new Date(), { scopes: ['pets:read', 'pets:write', 'events:read'] });
  const headers = { authorization: `Bearer ${key}` };
  return {
    stop,
    async create(name: string): Promise<{ id: number; name: string }> {
      const response = await app.inject({ method: 'POST', url: '/v1/pets', headers, payload: { name, categoryId: 1 } });
      assert.equal(response.statusCode, 201, response.body);
      return response.json();
    },
    /** The feed after `after` (from the oldest without it), once it lists `count` events. */
    async feed(count: number, after?: string): Promise<FeedEvent[]> {
      let events: FeedEvent[] = [];
      // PostgreSQL lists an event once every older transaction on the server has ended.
      await until(async () => {
        const query = after === undefined ? '' : `&after=${after}`;
        const response = await app.inject({ method: 'GET', url: `/v1/events?limit=100${query}`, headers });
        assert.equal(response.statusCode, 200, response.body);
        events = response.json();
        return events.length >= count;
      });
      return events;
    },
  };
}

/** The greatest of `ids`: event ids compare as strings in the feed's order (docs/events.md#ids). */
const greatest = (ids: Iterable<string>) => [...ids].sort().at(-1)!;

/**
 * What a receiver and a feed reader saw of a database before it was replaced by an older copy:
 * the service made `before` events, the copy was taken (`takeCopy`), then it made three more,
 * each delivered to the endpoint. Resolves to the event ids given, and the last one, the cursor
 * a reader holds.
 */
async function historyBeforeRestore(
  t: TestContext,
  store: Store,
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  takeCopy: () => Promise<void>,
) {
  const service = await serveOn(t, store);
  for (const name of ['kept 1', 'kept 2']) await service.create(name);
  await receiver.waitFor(2);
  await takeCopy();
  for (const name of ['lost 1', 'lost 2', 'lost 3']) await service.create(name);
  await receiver.waitFor(5);
  const feed = await service.feed(5);
  await service.stop();
  await store.close();
  const ids = new Set(feed.map((event) => event.id));
  const delivered = new Set(receiver.received.map((request) => String(request.headers['webhook-id'])));
  assert.deepEqual(delivered, ids, 'every event was delivered before the restore');
  return { ids, held: feed.at(-1)!.id, lastPet: feed.at(-1)!.data.id };
}

/**
 * The service on the restored database: a new pet's event follows every id given out before
 * the restore, the reader holding the last of them gets it, and the receiver gets it with a
 * webhook-id it has never seen.
 */
async function assertFreshIds(
  t: TestContext,
  store: Store,
  receiver: Awaited<ReturnType<typeof startReceiver>>,
  before: { ids: Set<string>; held: string },
) {
  const service = await serveOn(t, store);
  const pet = await service.create('after the restore');
  const [event, ...more] = await service.feed(1, before.held);
  assert.deepEqual(more, [], 'the reader holding the last id gets the new event, and only it');
  assert.equal(event!.data.id, pet.id);
  assert.ok(event!.id > greatest(before.ids), `${event!.id} follows ${greatest(before.ids)}`);
  assert.ok(!before.ids.has(event!.id), 'an id never given before');
  const delivered = () => receiver.received.find((request) => request.headers['webhook-id'] === event!.id);
  await until(() => delivered() !== undefined, 10_000, 'the delivery of the new event');
  assert.equal((JSON.parse(delivered()!.body) as FeedEvent).data.name, 'after the restore');
  await service.stop();
  return pet;
}

/** A SQLite database with an endpoint at a receiver, and where its backup goes. */
async function sqliteWithReceiver(t: TestContext) {
  const folder = tempFolder(t);
  const db = join(folder, 'petstore.db');
  const copy = join(folder, 'older.db');
  const receiver = await startReceiver(t);
  const store = openSqliteStore(db);
  await store.migrate();
  await addEndpoint(store, receiver.url);
  return { db, copy, receiver, store };
}

test('SQLite: after petstore restore of an older backup, new event ids follow every id given before, and pet ids go on', async (t) => {
  const { db, copy, receiver, store } = await sqliteWithReceiver(t);
  const before = await historyBeforeRestore(t, store, receiver, async () => {
    const backup = await runDatabase(['backup', copy], db);
    assert.equal(backup.code, 0, backup.err.join('\n'));
  });

  const restored = await runDatabase(['restore', copy], db);
  assert.equal(restored.code, 0, restored.err.join('\n'));
  const again = openSqliteStore(db);
  t.after(() => again.close());
  await again.migrate();
  const pet = await assertFreshIds(t, again, receiver, before);
  assert.equal(pet.id, before.lastPet + 1, 'the pet id counter came from the database it replaced');
});

test('SQLite: restores of an older backup where the database they replace is gone still give new event ids', async (t) => {
  const { db, copy, receiver, store } = await sqliteWithReceiver(t);
  const first = await historyBeforeRestore(t, store, receiver, async () => {
    assert.equal((await runDatabase(['backup', copy], db)).code, 0);
  });
  const gone = () => ['', '-wal', '-shm'].forEach((suffix) => rmSync(db + suffix, { force: true }));

  // Lost, with everything it gave out: the copy is all there is.
  gone();
  assert.equal((await runDatabase(['restore', copy], db)).code, 0);
  const second = openSqliteStore(db);
  await second.migrate();
  await assertFreshIds(t, second, receiver, first);
  await second.close();
  const given = new Set([...first.ids, ...receiver.received.map((request) => String(request.headers['webhook-id']))]);

  // Lost again, and the same copy restored: not even the database the first restore made is there.
  gone();
  assert.equal((await runDatabase(['restore', copy], db)).code, 0);
  const third = openSqliteStore(db);
  t.after(() => third.close());
  await third.migrate();
  await assertFreshIds(t, third, receiver, { ids: given, held: greatest(given) });
});

async function admin(url: string, sql: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/**
 * Dumps the service's schema at `url` with `format` (custom, for pg_restore; plain, for psql) at
 * `takeCopy`; after the history, drops it (the database the restore replaces is gone), restores
 * the dump into a new database, and resolves to the restored database's URL.
 */
async function dumpAndRestore(t: TestContext, url: string, format: 'custom' | 'plain') {
  const dump = join(tempFolder(t, 'petstore-dump-'), 'petstore.dump');
  const schema = /search_path=([a-z0-9_]+)/.exec(new URL(url).searchParams.get('options') ?? '')![1]!;
  const takeCopy = async () =>
    runPgTool('pg_dump', [`--format=${format}`, '--no-owner', `--schema=${schema}`, '--file', dump, forLibpq(url)]);
  const restore = async () => {
    await admin(POSTGRES_URL, `DROP SCHEMA ${schema} CASCADE`);
    const database = `petstore_restore_${randomBytes(6).toString('hex')}`;
    await admin(POSTGRES_URL, `CREATE DATABASE ${database}`);
    t.after(() => admin(POSTGRES_URL, `DROP DATABASE IF EXISTS ${database} WITH (FORCE)`));
    const restored = new URL(url);
    restored.pathname = `/${database}`;
    if (format === 'custom')
      runPgTool('pg_restore', ['--no-owner', '--exit-on-error', '--dbname', forLibpq(restored.href), dump]);
    else runPgTool('psql', ['--quiet', '--set', 'ON_ERROR_STOP=1', '--file', dump, forLibpq(restored.href)]);
    return restored.href;
  };
  return { takeCopy, restore };
}

/** A PostgreSQL schema of its own with an endpoint at a receiver. */
async function postgresWithReceiver(t: TestContext) {
  const url = await createPostgresSchema(t);
  const receiver = await startReceiver(t);
  const store = openPostgresStore(url);
  await store.migrate();
  await addEndpoint(store, receiver.url);
  return { url, receiver, store };
}

test(
  'PostgreSQL: after pg_restore of an older dump, the database it replaced gone, new event ids follow every id given before',
  { skip: missingPgTools(['pg_dump', 'pg_restore', 'psql'], 'the restores of an older dump') },
  async (t) => {
    const { url, receiver, store } = await postgresWithReceiver(t);
    const { takeCopy, restore } = await dumpAndRestore(t, url, 'custom');
    const before = await historyBeforeRestore(t, store, receiver, takeCopy);

    const restored = openPostgresStore(await restore());
    t.after(() => restored.close());
    // As serve does when it starts.
    assert.deepEqual(await restored.migrate(), []);
    await assertFreshIds(t, restored, receiver, before);
  },
);

test(
  'PostgreSQL: after psql of an older plain dump, new event ids follow those an earlier release gave out on a server whose transaction ids were far ahead',
  { skip: missingPgTools(['pg_dump', 'pg_restore', 'psql'], 'the restores of an older dump') },
  async (t) => {
    const { url, receiver, store } = await postgresWithReceiver(t);
    // The event clock as earlier releases kept it: the server's transaction ids, as they are.
    await admin(url, 'UPDATE event_clock SET tx_offset = 0');
    const { takeCopy, restore } = await dumpAndRestore(t, url, 'plain');
    const before = await historyBeforeRestore(t, store, receiver, async () => {
      await takeCopy();
      // After the dump the database moved to a server whose transaction ids are far ahead of
      // this one's: the events it gave out there carry them.
      await admin(url, 'UPDATE event_clock SET tx_offset = 1000000000000');
    });
    assert.ok(greatest(before.ids) > `evt_${(10n ** 12n).toString(16).padStart(16, '0')}`);

    // Back on this server, from the older dump, whose events are this server's.
    const restored = openPostgresStore(await restore());
    t.after(() => restored.close());
    assert.deepEqual(await restored.migrate(), []);
    await assertFreshIds(t, restored, receiver, before);
  },
);
