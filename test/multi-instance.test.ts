import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import pg from 'pg';
import { runKeys } from './in-process.js';
import { childEnv, runCli, startServer, type Server } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';
import { readMigrations } from '../src/store/migrations.js';

const FIRST_KEY = /^ {4}(psk_[A-Za-z0-9_-]{43})$/m;

interface Pet {
  id: number;
  name: string;
  categoryId: number;
  status: string;
}

/** Every row of `sql` on the database at `url`. */
async function select<R extends pg.QueryResultRow>(url: string, sql: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 5000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(sql)).rows;
  } finally {
    await client.end();
  }
}

test('two petstore processes share one PostgreSQL database', { skip: postgresSkip }, async (t) => {
  const url = await createPostgresSchema(t);
  const env = () => childEnv(t, { DATABASE_URL: url });
  // Both start at the same moment on an empty schema: both migrate, both look for a first key.
  const [a, b] = await Promise.all([startServer(t, env()), startServer(t, env())]);
  const [, firstKey] = await Promise.any([a.waitForOutput(FIRST_KEY, 2000), b.waitForOutput(FIRST_KEY, 2000)]);
  const auth = (key: string) => ({ authorization: `Bearer ${key}` });
  const get = (server: Server, path: string, key = firstKey!) => fetch(server.url + path, { headers: auth(key) });
  const create = (server: Server, name: string) =>
    fetch(`${server.url}/v1/pets`, {
      method: 'POST',
      headers: { ...auth(firstKey!), 'content-type': 'application/json' },
      body: JSON.stringify({ name, categoryId: 7 }),
    });

  await t.test('both migrate safely and only one first key is issued and printed between them', async () => {
    assert.equal(a.child.exitCode, null, a.stderr());
    assert.equal(b.child.exitCode, null, b.stderr());
    const migrations = await select<{ version: number }>(url, 'SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(
      migrations.map((row) => row.version),
      readMigrations('postgres').map((migration) => migration.version),
    );
    assert.equal((await get(a, '/v1/pets')).status, 200);
    assert.equal((await get(b, '/v1/pets')).status, 200);
    const keys = await runCli(['keys', 'list', '--json'], env());
    assert.equal(keys.code, 0, keys.stderr);
    assert.equal(keys.stdout.trim().split('\n').length, 1, 'one key in the database');
    // The CLI took far longer than either instance needs to write its announcement after listening.
    const printed = (a.stderr() + b.stderr()).match(/psk_[A-Za-z0-9_-]{43}/g) ?? [];
    assert.deepEqual(new Set(printed), new Set([firstKey]), 'one key printed between the two');
    assert.ok(a.stderr().includes(firstKey!) !== b.stderr().includes(firstKey!), 'printed by exactly one instance');
  });

  await t.test('animals added through A are listed and fetched through B', async () => {
    const created: Pet[] = [];
    for (const name of ['Rex', 'Tom', 'Kit']) {
      const response = await create(a, name);
      assert.equal(response.status, 201);
      created.push((await response.json()) as Pet);
    }
    const listed = await get(b, '/v1/pets');
    assert.equal(listed.status, 200);
    assert.deepEqual(await listed.json(), created);
    const fetched = await get(b, `/v1/pets/${created[1]!.id}`);
    assert.equal(fetched.status, 200);
    assert.deepEqual(await fetched.json(), created[1]);
  });

  await t.test('100 concurrent creates split across A and B all succeed with distinct ids', async () => {
    const responses = await Promise.all(
      Array.from({ length: 100 }, (_, i) => create(i % 2 === 0 ? a : b, `Concurrent ${i}`)),
    );
    assert.deepEqual(
      responses.map((response) => response.status),
      Array(100).fill(201),
    );
    const ids = await Promise.all(responses.map(async (response) => ((await response.json()) as Pet).id));
    assert.equal(new Set(ids).size, 100);
    for (const [i, response] of responses.entries()) {
      assert.equal(response.headers.get('location'), `/v1/pets/${ids[i]}`);
    }
  });

  await t.test('50 simultaneous creates with one Idempotency-Key split across A and B make one animal', async () => {
    const responses = await Promise.all(
      Array.from({ length: 50 }, (_, i) =>
        fetch(`${(i % 2 === 0 ? a : b).url}/v1/pets`, {
          method: 'POST',
          headers: { ...auth(firstKey!), 'content-type': 'application/json', 'idempotency-key': 'shared-retry' },
          body: JSON.stringify({ name: 'Once', categoryId: 7 }),
        }).then(async (response) => ({ status: response.status, body: await response.text() })),
      ),
    );
    const rows = await select<{ n: string }>(url, "SELECT count(*) AS n FROM pets WHERE name = 'Once'");
    assert.equal(Number(rows[0]!.n), 1);
    const created = responses.filter((response) => response.status === 201);
    assert.ok(created.length >= 1);
    assert.ok(created.every((response) => response.body === created[0]!.body));
    assert.ok(responses.every((response) => [201, 409].includes(response.status)));
    // Once the first is answered, a retry on either instance replays it.
    for (const server of [a, b]) {
      const retry = await fetch(`${server.url}/v1/pets`, {
        method: 'POST',
        headers: { ...auth(firstKey!), 'content-type': 'application/json', 'idempotency-key': 'shared-retry' },
        body: JSON.stringify({ categoryId: 7, name: 'Once' }),
      });
      assert.equal(retry.status, 201);
      assert.equal(retry.headers.get('idempotent-replayed'), 'true');
      assert.equal(await retry.text(), created[0]!.body);
    }
  });

  await t.test('following Link rel="next" alternately through A and B visits every animal once, in order', async () => {
    const stored = await select<{ id: string }>(url, 'SELECT id FROM pets ORDER BY id');
    assert.equal(stored.length, 104);
    const visited: number[] = [];
    let next: string | undefined = '/v1/pets?limit=7';
    for (let page = 0; next !== undefined && page < 30; page++) {
      const response = await get(page % 2 === 0 ? a : b, next);
      assert.equal(response.status, 200);
      visited.push(...((await response.json()) as Pet[]).map((pet) => pet.id));
      next = /^<([^>]+)>; rel="next"$/.exec(response.headers.get('link') ?? '')?.[1];
    }
    assert.equal(next, undefined, 'the last page has no next link');
    assert.deepEqual(
      visited,
      stored.map((row) => Number(row.id)),
    );
  });

  await t.test('a key revoked with `petstore keys revoke` is refused by both within one second', async () => {
    const made = await runKeys(['create', '--name', 'ci', '--json'], env());
    assert.equal(made.code, 0, made.stderr);
    const created = JSON.parse(made.stdout) as { id: number; key: string };
    assert.equal((await get(a, '/v1/pets', created.key)).status, 200);
    assert.equal((await get(b, '/v1/pets', created.key)).status, 200);

    const revoked = await runCli(['keys', 'revoke', String(created.id)], env());
    assert.equal(revoked.code, 0, revoked.stderr);
    const deadline = Date.now() + 1000;
    const refusedBy = new Set<Server>();
    while (refusedBy.size < 2 && Date.now() <= deadline) {
      for (const server of [a, b]) {
        const response = await get(server, '/v1/pets', created.key);
        if (response.status === 401) refusedBy.add(server);
        else assert.equal(response.status, 200);
      }
      if (refusedBy.size < 2) await sleep(50);
    }
    assert.equal(refusedBy.size, 2, 'both instances refuse the revoked key');
    assert.ok(Date.now() <= deadline, 'within one second of the revocation');
    const refused = await get(b, '/v1/pets', created.key);
    assert.equal(refused.status, 401);
    assert.equal(((await refused.json()) as { code: string }).code, 'unauthorized');
    assert.equal((await get(a, '/v1/pets')).status, 200, 'the other key still works');
  });
  /** Polls both instances with `key` until both answer `status`; the time that took, in ms from `since`. */
  async function untilBoth(key: string, status: number, since: number): Promise<number> {
    const answered = new Set<Server>();
    while (answered.size < 2 && Date.now() - since <= 2000) {
      for (const server of [a, b]) {
        const response = await get(server, '/v1/pets', key);
        if (response.status === status) answered.add(server);
      }
      if (answered.size < 2) await sleep(25);
    }
    assert.equal(answered.size, 2, `both instances answer ${status}`);
    return Date.now() - since;
  }

  await t.test('a read-only key is refused 403 on create by both, before validation', async () => {
    const made = await runKeys(['create', '--name', 'dashboard', '--scope', 'pets:read', '--json'], env());
    const { key } = JSON.parse(made.stdout) as { key: string };
    for (const server of [a, b]) {
      assert.equal((await get(server, '/v1/pets', key)).status, 200);
      const refused = await fetch(`${server.url}/v1/pets`, {
        method: 'POST',
        headers: { ...auth(key), 'content-type': 'application/json' },
        body: '{"not json',
      });
      assert.equal(refused.status, 403);
      assert.equal(
        refused.headers.get('www-authenticate'),
        'Bearer realm="petstore", error="insufficient_scope", scope="pets:write"',
      );
    }
  });

  await t.test('a rolled key works on both through the grace; after it both refuse it within one second', async () => {
    const made = await runKeys(['create', '--name', 'rolled', '--json'], env());
    const old = JSON.parse(made.stdout) as { id: number; key: string };
    const rolled = await runCli(['keys', 'roll', String(old.id), '--grace', '3s', '--json'], env());
    assert.equal(rolled.code, 0, rolled.stderr);
    const successor = JSON.parse(rolled.stdout) as { key: string; replacedExpiresAt: string };
    const graceEnds = Date.parse(successor.replacedExpiresAt);
    for (const server of [a, b]) {
      assert.equal((await get(server, '/v1/pets', old.key)).status, 200);
      assert.equal((await get(server, '/v1/pets', successor.key)).status, 200);
    }
    assert.ok(Date.now() < graceEnds, 'checked within the grace');
    while (Date.now() < graceEnds) await sleep(25);
    assert.ok((await untilBoth(old.key, 401, graceEnds)) <= 1000, 'refused within one second of its expiry');
    const refused = await get(a, '/v1/pets', old.key);
    assert.equal(refused.headers.get('www-authenticate'), 'Bearer realm="petstore", error="invalid_token"');
    assert.match(((await refused.json()) as { message: string }).message, /expired/);
    for (const server of [a, b]) assert.equal((await get(server, '/v1/pets', successor.key)).status, 200);
  });

  await t.test('keys roll --grace 0: both refuse the old key within one second', async () => {
    const made = await runKeys(['create', '--name', 'leaked', '--json'], env());
    const old = JSON.parse(made.stdout) as { id: number; key: string };
    for (const server of [a, b]) assert.equal((await get(server, '/v1/pets', old.key)).status, 200);
    const rolled = await runCli(['keys', 'roll', String(old.id), '--grace', '0', '--json'], env());
    assert.equal(rolled.code, 0, rolled.stderr);
    const rolledAt = Date.now();
    assert.ok((await untilBoth(old.key, 401, rolledAt)) <= 1000, 'refused within one second of the roll');
    const { key } = JSON.parse(rolled.stdout) as { key: string };
    for (const server of [a, b]) assert.equal((await get(server, '/v1/pets', key)).status, 200);
  });
});
