import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, test, type TestContext } from 'node:test';
import type { FastifyInstance, InjectOptions, LightMyRequestResponse } from 'fastify';
import type { Pair } from '../bench/pg-cluster.js';
import { buildApp } from '../src/app.js';
import { runDatabaseCommand } from '../src/cli/database.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { scopes } from '../src/schemas.js';
import { describeDatabase } from '../src/server.js';
import { openPostgresStore } from '../src/store/postgres.js';
import type { Store } from '../src/store/store.js';
import { assertError } from './helpers.js';
import { PostgresProxy } from './pg-proxy.js';
import { childEnv, startServer } from './process.js';
import { pairSkip, replicatedSchema, sharedPair } from './replica-cluster.js';

// Small, so that what must not hang is seen not to within a test's time.
const TIMEOUT_MS = 1000;

interface Ready {
  status: string;
  primary?: 'answering' | 'not_answering';
  replicas?: { name: string; state: string; lagMs: number | null }[];
}

interface Instance {
  app: FastifyInstance;
  store: Store;
  /** The instance's log lines, parsed. */
  logs: { level: number; msg: string; [field: string]: unknown }[];
  /** A key with every scope, issued through this instance. */
  key: string;
  /** `inject` with `key` (this instance's own unless given). */
  call(options: InjectOptions, key?: string): Promise<LightMyRequestResponse>;
  ready(): Promise<Ready>;
  /** Another key with every scope: one that has written nothing. */
  issue(name: string): Promise<string>;
}

/** One service instance on the primary `url` with the replicas `readUrls`, as `serve` wires it; closed after the test. */
async function serve(t: TestContext, url: string, readUrls: string[], maxLagMs = 1000): Promise<Instance> {
  const store = openPostgresStore(url, { readUrls, timeoutMs: TIMEOUT_MS, replicaMaxLagMs: maxLagMs, poolSize: 4 });
  const logs: Instance['logs'] = [];
  const config = loadConfig({
    DATABASE_URL: url,
    DATABASE_READ_URLS: readUrls.join(','),
    PETSTORE_DB_TIMEOUT_MS: String(TIMEOUT_MS),
    PETSTORE_REPLICA_MAX_LAG_MS: String(maxLagMs),
    PETSTORE_RATE_LIMIT: 'off',
  });
  const app = await buildApp({
    config,
    store,
    logStream: { write: (line: string) => void logs.push(JSON.parse(line)) },
  });
  t.after(async () => {
    await app.close();
    await store.close();
  });
  const issue = async (name: string) => (await issueKey(store, name, new Date(), { scopes: [...scopes] })).key;
  const key = await issue('writer');
  const call = (options: InjectOptions, as = key) =>
    app.inject({ ...options, headers: { authorization: `Bearer ${as}`, ...options.headers } });
  const ready = async () => (await app.inject({ url: '/readyz' })).json() as Ready;
  return { app, store, logs, key, call, ready, issue };
}

/** Waits until `done` says so, checking every 20 ms, for at most `ms`; resolves to the ms it took. */
async function waitFor(what: string, ms: number, done: () => Promise<boolean> | boolean): Promise<number> {
  const started = performance.now();
  while (!(await done())) {
    if (performance.now() - started > ms) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return performance.now() - started;
}

const stateOf = async (instance: Instance) => (await instance.ready()).replicas?.[0]?.state;
const inUse = (instance: Instance) =>
  waitFor('the replica in use', 5000, async () => (await stateOf(instance)) === 'in_use');

/** How many reads of the animals, the feed or keys the replica has run so far, from its statement log. */
const replicaReads = (pair: Pair) =>
  readFileSync(pair.replica.log, 'utf8').match(
    /execute (getPets|listAllPagesAt|listPagesByStatusAt|listEvents|findKey):/g,
  )?.length ?? 0;

/** The reads the instance sent its replicas so far, from its /metrics. */
async function replicaReadsOf(instance: Instance): Promise<number> {
  const metrics = (await instance.call({ url: '/metrics' })).body;
  return [...metrics.matchAll(/^petstore_replica_reads_total\{replica="[^"]+"\} ([0-9]+)$/gm)].reduce(
    (sum, [, count]) => sum + Number(count),
    0,
  );
}

async function create(instance: Instance, name: string, key?: string) {
  const response = await instance.call({ method: 'POST', url: '/v1/pets', payload: { name, categoryId: 1 } }, key);
  assert.equal(response.statusCode, 201, response.body);
  return { id: response.json<{ id: number }>().id, location: String(response.headers.location), body: response.body };
}

const ids = (response: LightMyRequestResponse) => response.json<{ id: number }[]>().map((pet) => pet.id);

describe('PostgreSQL with a streaming replica (DATABASE_READ_URLS)', { skip: pairSkip }, () => {
  test('reads reach the replica, and 200 creates are each read back at once through Location, by their key and another', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const instance = await serve(t, url, [readUrl]);
    await inUse(instance);
    const reader = await instance.issue('reader');
    for (let round = 0; round < 10; round++) {
      const made = await Promise.all(Array.from({ length: 20 }, (_, i) => create(instance, `pet ${round}.${i}`)));
      const answers = await Promise.all(
        made.flatMap(({ location }) => [instance.call({ url: location }), instance.call({ url: location }, reader)]),
      );
      answers.forEach((answer, i) => {
        assert.equal(answer.statusCode, 200, `${made[i >> 1]!.location}: ${answer.body}`);
        assert.equal(answer.body, made[i >> 1]!.body);
      });
    }
    await pair.caughtUp();
    const before = replicaReads(pair);
    // Every page, by a key that has written nothing: 20 pages of 10 from the replica.
    let next: string | undefined = '/v1/pets?limit=10';
    const seen: number[] = [];
    while (next) {
      const page = await instance.call({ url: next }, reader);
      assert.equal(page.statusCode, 200);
      seen.push(...ids(page));
      next = /<([^>]+)>; rel="next"/.exec(String(page.headers.link ?? ''))?.[1];
    }
    assert.equal(seen.length, 200);
    assert.deepEqual(
      seen,
      [...seen].sort((a, b) => a - b),
    );
    await waitFor("the pages in the replica's statement log", 2000, () => replicaReads(pair) - before >= 20);
    const metrics = (await instance.call({ url: '/metrics' })).body;
    const replicaCount = Number(/^petstore_replica_reads_total\{replica="[^"]+"\} ([0-9]+)$/m.exec(metrics)?.[1]);
    assert.ok(replicaCount >= 20, `petstore_replica_reads_total ${replicaCount}`);
  });

  test('a paused replica is left out within a second and new pets are listed meanwhile; resumed, it is taken back, each with a log line', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const writer = await serve(t, url, [readUrl]);
    const other = await serve(t, url, [readUrl]);
    await Promise.all([inUse(writer), inUse(other)]);
    const reader = await other.issue('reader');
    await pair.replica.query('SELECT pg_wal_replay_pause()');
    t.after(() => pair.replica.query('SELECT pg_wal_replay_resume()').catch(() => {}));
    const leftOut = await waitFor('paused', 1000, async () => (await stateOf(other)) === 'paused');
    t.diagnostic(`left out ${Math.round(leftOut)} ms after the pause`);
    const { id } = await create(writer, 'made while paused');
    // Through another instance, by a key that did not write it: listed within the bound.
    const listed = await waitFor('the new pet listed', 1000, async () =>
      ids(await other.call({ url: '/v1/pets?limit=100' }, reader)).includes(id),
    );
    t.diagnostic(`listed ${Math.round(listed)} ms after its 201`);
    const metrics = (await other.call({ url: '/metrics' })).body;
    assert.match(metrics, /^petstore_replica_state\{replica="[^"]+",state="paused"\} 1$/m);
    assert.match(metrics, /^petstore_replica_state\{replica="[^"]+",state="in_use"\} 0$/m);
    assert.ok(other.logs.some((line) => line.msg === 'read replica left out: paused' && line.level === 40));
    await pair.replica.query('SELECT pg_wal_replay_resume()');
    await waitFor('taken back', 2000, async () => (await stateOf(other)) === 'in_use');
    assert.ok(other.logs.some((line) => line.msg === 'read replica in use' && line.was === 'paused'));
  });

  test('a replica stopped while it is read from costs no answer, and is taken back once it answers again', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const instance = await serve(t, url, [readUrl]);
    await inUse(instance);
    const made = await Promise.all(Array.from({ length: 5 }, (_, i) => create(instance, `pet ${i}`)));
    await pair.caughtUp();
    const reader = await instance.issue('reader');
    const statuses = new Map<number, number>();
    let reading = true;
    const reads = (async () => {
      for (let i = 0; reading && i < 100_000; i++) {
        const answers = await Promise.all([
          instance.call({ url: '/v1/pets?limit=10' }, reader),
          instance.call({ url: made[i % 5]!.location }, reader),
        ]);
        for (const { statusCode } of answers) statuses.set(statusCode, (statuses.get(statusCode) ?? 0) + 1);
      }
    })();
    try {
      await waitFor('reads under way', 2000, () => (statuses.get(200) ?? 0) > 20);
      await pair.replica.stop('immediate');
      t.after(() => pair.replica.start().catch(() => {}));
      const leftOut = await waitFor('unreachable', 1000, async () => (await stateOf(instance)) === 'unreachable');
      t.diagnostic(`left out ${Math.round(leftOut)} ms after it stopped`);
      const sofar = statuses.get(200)!;
      await waitFor('reads go on', 2000, () => statuses.get(200)! > sofar + 20);
    } finally {
      reading = false;
      await reads;
    }
    assert.deepEqual([...statuses.keys()], [200], JSON.stringify(Object.fromEntries(statuses)));
    await pair.replica.start();
    await waitFor('taken back', 10_000, async () => (await stateOf(instance)) === 'in_use');
  });

  test('with the primary stopped, reads answer 200 from the replica (a key unused so far checked there) and writes 503 with Retry-After at once', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const instance = await serve(t, url, [readUrl]);
    await inUse(instance);
    const made = await create(instance, 'kept');
    const unused = await instance.issue('unused');
    // Stopped right after the writer's create: a clean stop streams all the primary wrote.
    await pair.caughtUp();
    await pair.primary.stop('fast');
    t.after(() => pair.primary.start().catch(() => {}));
    await waitFor('the primary not answering', 2000, async () => (await instance.ready()).primary === 'not_answering');
    const ready = await instance.app.inject({ url: '/readyz' });
    assert.equal(ready.statusCode, 200, 'ready: reads are answered');
    // The writer's own reads too, once a check has found the replica holding all it received.
    const own = await waitFor("the writer's reads on the replica", 1000, async () => {
      return (await instance.call({ url: '/v1/pets' })).statusCode === 200;
    });
    t.diagnostic(`the writer's reads answered 200 ${Math.round(own)} ms after the primary was found not answering`);
    for (const key of [instance.key, unused]) {
      const list = await instance.call({ url: '/v1/pets' }, key);
      assert.equal(list.statusCode, 200, list.body);
      assert.deepEqual(ids(list), [made.id]);
      const one = await instance.call({ url: made.location }, key);
      assert.equal(one.statusCode, 200, one.body);
      assert.equal(one.body, made.body);
      const feed = await instance.call({ url: '/v1/events' }, key);
      assert.equal(feed.statusCode, 200, feed.body);
      assert.equal(feed.json<unknown[]>().length, 1);
    }
    const started = performance.now();
    const write = await instance.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } });
    const took = performance.now() - started;
    assertError(write, 503, 'unavailable');
    assert.equal(write.headers['retry-after'], '1');
    assert.ok(took < TIMEOUT_MS + 1000, `the write took ${Math.round(took)} ms`);
    assert.ok(instance.logs.some((line) => /^primary database not answering/.test(line.msg) && line.level === 40));
    await pair.primary.start();
    await waitFor('writes again', 10_000, async () => {
      const again = await instance.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } });
      return again.statusCode === 201;
    });
    await waitFor('the primary answering', 2000, async () => (await instance.ready()).primary === 'answering');
    assert.ok(instance.logs.some((line) => line.msg === 'primary database answering again'));
  });

  test('a replica, then the primary, gone silent (no reset, no close): every answer within the bound, reads 200 throughout', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const proxies = await Promise.all(
      [pair.primary.port, pair.replica.port].map(async (port) => {
        const proxy = new PostgresProxy('127.0.0.1', port);
        await proxy.start();
        t.after(() => proxy.stop());
        return proxy;
      }),
    );
    const [toPrimary, toReplica] = proxies as [PostgresProxy, PostgresProxy];
    const through = (direct: string, proxy: PostgresProxy) => direct.replace(/:[0-9]+\//, `:${proxy.port}/`);
    const instance = await serve(t, through(url, toPrimary), [through(readUrl, toReplica)]);
    await inUse(instance);
    const made = await create(instance, 'kept');
    await waitFor("the writer's reads on the replica", 2000, async () => {
      const before = await replicaReadsOf(instance);
      await instance.call({ url: '/v1/pets' });
      return (await replicaReadsOf(instance)) > before;
    });
    const bound = TIMEOUT_MS + 500 + 250;
    /** Reads for `ms`, each timed: every one must be a 200 within the bound. */
    const readFor = async (ms: number) => {
      const until = performance.now() + ms;
      while (performance.now() < until) {
        const started = performance.now();
        const [list, one] = await Promise.all([
          instance.call({ url: '/v1/pets' }),
          instance.call({ url: made.location }),
        ]);
        const took = performance.now() - started;
        assert.deepEqual([list.statusCode, one.statusCode], [200, 200], `${list.body} ${one.body}`);
        assert.ok(took < bound, `reads took ${Math.round(took)} ms`);
      }
    };
    toReplica.silent = true;
    await readFor(1000);
    assert.equal(await stateOf(instance), 'unreachable');
    toReplica.silent = false;
    const back = await waitFor('taken back', 5000, async () => (await stateOf(instance)) === 'in_use');
    t.diagnostic(`the replica taken back ${Math.round(back)} ms after it answered again`);
    toPrimary.silent = true;
    await waitFor('the primary not answering', 2000, async () => (await instance.ready()).primary === 'not_answering');
    await readFor(500);
    const started = performance.now();
    const write = await instance.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } });
    assertError(write, 503, 'unavailable');
    assert.ok(performance.now() - started < bound, `the write took ${Math.round(performance.now() - started)} ms`);
    toPrimary.silent = false;
    const writing = await waitFor('writes again', 10_000, async () => {
      const again = await instance.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 1 } });
      return again.statusCode === 201;
    });
    t.diagnostic(`writes answered 201 ${Math.round(writing)} ms after the primary answered again`);
  });

  test('a key revoked through another store is refused within a second while replicas answer reads', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const instance = await serve(t, url, [readUrl]);
    await inUse(instance);
    const { key, record } = await issueKey(instance.store, 'soon revoked');
    assert.equal((await instance.call({ url: '/v1/pets' }, key)).statusCode, 200);
    // As `petstore keys revoke` does: through a store of its own, on the primary.
    const elsewhere = openPostgresStore(url, { poolSize: 1 });
    t.after(() => elsewhere.close());
    assert.equal(await elsewhere.revokeKey(record.id, new Date()), true);
    const took = await waitFor(
      'refused',
      1000,
      async () => (await instance.call({ url: '/v1/pets' }, key)).statusCode === 401,
    );
    t.diagnostic(`refused ${Math.round(took)} ms after the revocation`);
  });

  test('/readyz and /metrics show the primary and each replica, its state and lag, and no password', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    // Trust authentication ignores it: it must show nowhere all the same.
    const withPassword = readUrl.replace('postgres@', 'postgres:s3cret-word@');
    const instance = await serve(t, url, [withPassword, `postgres://app:other-s3cret@127.0.0.1:1/test`]);
    await inUse(instance);
    const name = `127.0.0.1:${pair.replica.port}/test`;
    const ready = await instance.app.inject({ url: '/readyz' });
    assert.equal(ready.statusCode, 200);
    const body = ready.json<Ready>();
    assert.equal(body.status, 'ready');
    assert.equal(body.primary, 'answering');
    assert.deepEqual(
      body.replicas!.map(({ name, state }) => ({ name, state })),
      [
        { name, state: 'in_use' },
        { name: '127.0.0.1:1/test', state: 'unreachable' },
      ],
    );
    assert.equal(typeof body.replicas![0]!.lagMs, 'number');
    await instance.call({ url: '/v1/pets' }, await instance.issue('reader'));
    const metrics = (await instance.call({ url: '/metrics' })).body;
    assert.match(metrics, new RegExp(`^petstore_replica_state\\{replica="${name}",state="in_use"\\} 1$`, 'm'));
    assert.match(metrics, /^petstore_replica_state\{replica="127\.0\.0\.1:1\/test",state="unreachable"\} 1$/m);
    assert.match(metrics, new RegExp(`^petstore_replica_lag_seconds\\{replica="${name}"\\} [0-9.e-]+$`, 'm'));
    assert.match(metrics, new RegExp(`^petstore_replica_reads_total\\{replica="${name}"\\} [1-9][0-9]*$`, 'm'));
    assert.match(metrics, /^petstore_primary_reads_total [0-9]+$/m);
    assert.match(metrics, /^petstore_primary_answering 1$/m);
    const logged = JSON.stringify(instance.logs);
    for (const text of [ready.body, metrics, logged]) assert.doesNotMatch(text, /s3cret/);
    assert.ok(
      instance.logs.some(
        (line) => line.msg === 'read replica left out: unreachable' && line.replica === '127.0.0.1:1/test',
      ),
    );
  });

  test('petstore serve reads from the replicas DATABASE_READ_URLS names, and logs each one it takes in use', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const server = await startServer(t, childEnv(t, { DATABASE_URL: url, DATABASE_READ_URLS: readUrl }));
    const key = (await server.waitForOutput(/\n {4}(psk_[A-Za-z0-9_-]+)\n/))[1]!;
    await server.waitForOutput(/"msg":"read replica in use"/);
    const ready = (await (await fetch(`${server.url}/readyz`)).json()) as Ready;
    assert.deepEqual(ready.replicas, [
      { name: `127.0.0.1:${pair.replica.port}/test`, state: 'in_use', lagMs: ready.replicas![0]!.lagMs },
    ]);
    const before = replicaReads(pair);
    const list = await fetch(`${server.url}/v1/pets`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(list.status, 200);
    await waitFor("the list in the replica's statement log", 2000, () => replicaReads(pair) > before);
  });

  test('petstore migrate status names the primary, the standbys it streams to, and each replica as the service judges it', async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    const out: string[] = [];
    const err: string[] = [];
    const env = { DATABASE_URL: url, DATABASE_READ_URLS: `${readUrl},postgres://postgres@127.0.0.1:1/test` };
    const code = await runDatabaseCommand(['migrate', 'status'], {
      io: { out: (line) => out.push(line), err: (line) => err.push(line) },
      config: () => loadConfig(env),
      describe: describeDatabase,
    });
    assert.equal(code, 0, err.join('\n'));
    const said = err.join('\n');
    assert.match(
      said,
      new RegExp(
        `^Primary 127\\.0\\.0\\.1:${pair.primary.port}/test \\(DATABASE_URL\\): it streams to 127\\.0\\.0\\.1 \\(streaming`,
        'm',
      ),
    );
    assert.match(
      said,
      new RegExp(
        `^Read replica 127\\.0\\.0\\.1:${pair.replica.port}/test \\(DATABASE_READ_URLS\\): read from, [0-9]+ ms behind\\.$`,
        'm',
      ),
    );
    assert.match(said, /^Read replica 127\.0\.0\.1:1\/test \(DATABASE_READ_URLS\): left out: it does not answer\.$/m);
    assert.match(said, /^The database is up to date\.$/m);
    assert.ok(out.length > 1);
  });

  test("a replica behind misses nothing: a 201's Location read at once, the next page of a walk, and the feed read from both", async (t) => {
    const pair = await sharedPair();
    const { url, readUrl } = await replicatedSchema(t, pair);
    // The replica applies each commit a second late: in use (the bound is 5 s), and behind.
    pair.replica.configure(["recovery_min_apply_delay = '1000ms'"]);
    await pair.replica.reload();
    t.after(async () => {
      pair.replica.configure(['recovery_min_apply_delay = 0']);
      await pair.replica.reload();
    });
    const writer = await serve(t, url, [readUrl], 5000);
    const other = await serve(t, url, [readUrl], 5000);
    await Promise.all([inUse(writer), inUse(other)]);
    const reader = await other.issue('reader');
    const first = await Promise.all(Array.from({ length: 5 }, (_, i) => create(writer, `early ${i}`)));
    await pair.caughtUp();
    const later = await Promise.all(Array.from({ length: 5 }, (_, i) => create(writer, `late ${i}`)));
    const all = [...first, ...later].map(({ id }) => id).sort((a, b) => a - b);
    // The writer's key reads its writes (the primary); another key, through another instance, the replica.
    const page = await writer.call({ url: '/v1/pets?limit=7' });
    assert.deepEqual(ids(page), all.slice(0, 7));
    assert.deepEqual(
      ids(await other.call({ url: '/v1/pets?limit=20' }, reader)),
      all.slice(0, 5),
      'the replica is behind',
    );
    const next = /<([^>]+)>; rel="next"/.exec(String(page.headers.link))![1]!;
    assert.deepEqual(ids(await other.call({ url: next }, reader)), all.slice(7), 'the next page misses nothing');
    // A 201's Location, read at once by that other key: the replica does not have it, the primary does.
    for (const { location, body } of later) {
      const one = await other.call({ url: location }, reader);
      assert.equal(one.statusCode, 200, `${location}: ${one.body}`);
      assert.equal(one.body, body);
    }

    // The feed, a page from each in turn, while the writer creates: every event once, in order.
    let creating = true;
    const made = (async () => {
      for (let i = 0; creating && i < 1000; i++) await create(writer, `during ${i}`);
    })();
    const seen: string[] = [];
    let after: string | undefined;
    const started = performance.now();
    try {
      for (let i = 0; performance.now() - started < 1500; i++) {
        const [instance, key] = i % 2 === 0 ? [writer, writer.key] : [other, reader];
        const events = await instance.call({ url: `/v1/events?limit=3${after ? `&after=${after}` : ''}` }, key);
        assert.equal(events.statusCode, 200, events.body);
        for (const { id } of events.json<{ id: string }[]>()) seen.push(id);
        after = seen.at(-1) ?? after;
      }
    } finally {
      creating = false;
      await made;
    }
    // Then to the end, from the primary (the writer's key wrote last).
    for (let page = 0; page < 1000; page++) {
      const events = await writer.call({ url: `/v1/events?limit=100${after ? `&after=${after}` : ''}` });
      const got = events.json<{ id: string }[]>().map(({ id }) => id);
      seen.push(...got);
      after = seen.at(-1) ?? after;
      if (got.length < 100) break;
    }
    const stored = await pair.primary.query<{ count: string }>(
      `SELECT count(*)::text AS count FROM ${new URL(url).searchParams.get('options')!.split('=')[1]}.events`,
    );
    assert.equal(seen.length, Number(stored[0]!.count), 'every event');
    assert.equal(new Set(seen).size, seen.length, 'each once');
    assert.deepEqual(seen, [...seen].sort(), 'in order');
  });
});
