import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import { issueKey } from '../src/keys/issue.js';
import { parseIdempotencyKey } from '../src/pets/idempotency.js';
import type { Store } from '../src/store/store.js';
import { assertError, postRaw, startApp, tempSqliteStore, type TestApp } from './helpers.js';

const DAY = 24 * 60 * 60 * 1000;
const REX = '{"name":"Rex","categoryId":9007199254740993}';

const post = (app: TestApp, key: string, body = REX) => postRaw(app, body, { 'idempotency-key': key });

async function countPets(app: TestApp): Promise<number> {
  return (await app.store.listPets({ limit: 1000 })).length;
}

test('a retry with the same key and body gets the first response again and creates nothing', async (t) => {
  const app = await startApp(t);
  const first = await post(app, 'order-1');
  assert.equal(first.statusCode, 201);
  assert.equal(first.headers['idempotent-replayed'], undefined);
  const retry = await post(app, 'order-1');
  assert.equal(retry.statusCode, 201);
  assert.equal(retry.body, first.body);
  assert.equal(retry.body, '{"id":1,"name":"Rex","categoryId":9007199254740993,"status":"available"}');
  assert.equal(retry.headers.location, first.headers.location);
  assert.equal(retry.headers['content-type'], first.headers['content-type']);
  assert.equal(retry.headers['idempotent-replayed'], 'true');
  assert.equal(await countPets(app), 1);
});

test('the same JSON value is the same body: key order, white space and 7.0 do not matter', async (t) => {
  const app = await startApp(t);
  const first = await post(app, 'k', '{"name":"Rex","categoryId":7,"status":"sold"}');
  for (const body of [
    '{ "status" : "sold", "categoryId" : 7.0, "name" : "Rex" }',
    '{"name":"\\u0052ex","categoryId":7e0,"status":"sold"}',
  ]) {
    const retry = await post(app, 'k', body);
    assert.equal(retry.statusCode, 201, body);
    assert.equal(retry.body, first.body);
  }
  assert.equal(await countPets(app), 1);
});

test('the quoted form of the IETF draft and the bare form name the same key', async (t) => {
  const app = await startApp(t);
  const first = await post(app, '"a-key"');
  const retry = await post(app, 'a-key');
  assert.equal(retry.headers['idempotent-replayed'], 'true');
  assert.equal(retry.body, first.body);
  assert.equal(await countPets(app), 1);
});

test('the same key with a different body is 422 idempotency_mismatch, and nothing is stored', async (t) => {
  const app = await startApp(t);
  await post(app, 'k');
  for (const body of [
    '{"name":"Rex","categoryId":9007199254740992}',
    '{"name":"Rex","categoryId":9007199254740993,"status":"available"}',
    '{"name":"Max","categoryId":9007199254740993}',
  ]) {
    assertError(await post(app, 'k', body), 422, 'idempotency_mismatch', 'Idempotency-Key');
  }
  assert.equal(await countPets(app), 1);
});

test('a first request refused with a 4xx is not remembered', async (t) => {
  const app = await startApp(t);
  assertError(await post(app, 'k', '{"name":"","categoryId":7}'), 400, 'invalid_request', 'name');
  assertError(await post(app, 'k', '{"name":"Rex"'), 400, 'invalid_request');
  const created = await post(app, 'k', '{"name":"Max","categoryId":7}');
  assert.equal(created.statusCode, 201);
  assert.equal(created.headers['idempotent-replayed'], undefined);
  assert.equal(await countPets(app), 1);
});

test('keys are scoped to the API key: another key with the same Idempotency-Key creates its own animal', async (t) => {
  const app = await startApp(t);
  const { key: other } = await issueKey(app.store, 'other');
  const mine = await post(app, 'shared');
  const theirs = await postRaw(app, REX, { 'idempotency-key': 'shared', authorization: `Bearer ${other}` });
  assert.equal(theirs.statusCode, 201);
  assert.notEqual(theirs.headers.location, mine.headers.location);
  assert.equal(await countPets(app), 2);
});

test('a key is replayed for 24 hours, then it is free again', async (t) => {
  const app = await startApp(t);
  const start = app.clock.now();
  const first = await post(app, 'k');
  app.clock.set(start + DAY - 1);
  assert.equal((await post(app, 'k')).body, first.body);
  app.clock.set(start + DAY);
  const fresh = await post(app, 'k', '{"name":"Max","categoryId":1}');
  assert.equal(fresh.statusCode, 201);
  assert.equal(fresh.headers['idempotent-replayed'], undefined);
  assert.equal(await countPets(app), 2);
});

test('an empty, over-long, non-ASCII or malformed Idempotency-Key is a 400 naming the header', async (t) => {
  const app = await startApp(t);
  for (const key of ['', '"', '""', 'a b', 'x'.repeat(256), 'ключ', '"unterminated', '"bad\\escape"', 'a, b']) {
    assertError(await post(app, key), 400, 'invalid_request', 'Idempotency-Key');
  }
  // The header sent twice arrives joined as "a, a".
  // Sent twice, the header arrives joined: "a, a".
  assertError(
    await app.call({
      method: 'POST',
      url: '/v1/pets',
      payload: REX,
      headers: { 'content-type': 'application/json', 'idempotency-key': ['a', 'a'] },
    }),
    400,
    'invalid_request',
    'Idempotency-Key',
  );
  assert.equal(await countPets(app), 0);
});

test('parseIdempotencyKey reads both forms and refuses the rest', () => {
  assert.equal(parseIdempotencyKey(undefined), undefined);
  assert.equal(parseIdempotencyKey('8e03978e-40d5-43e8-bc93-6894a57f9324'), '8e03978e-40d5-43e8-bc93-6894a57f9324');
  assert.equal(parseIdempotencyKey('"8e03978e"'), '8e03978e');
  assert.equal(parseIdempotencyKey('"a\\"b\\\\c"'), 'a"b\\c');
  assert.equal(parseIdempotencyKey('~'.repeat(255)), '~'.repeat(255));
  assert.throws(() => parseIdempotencyKey('"a b"'), /Idempotency-Key/);
  assert.throws(() => parseIdempotencyKey('"a'), /Idempotency-Key/);
});

test('a retry while the first request is still being processed is 409 with Retry-After', async (t) => {
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const { store } = await tempSqliteStore(t);
  // Creates wait at the gate, as behind a slow database.
  const slow: Store = {
    ...store,
    createPetOnce: async (...args) => {
      await gate;
      return store.createPetOnce(...args);
    },
  };
  const app = await startApp(t, { store: slow });
  const first = post(app, 'k');
  await new Promise((resolve) => setImmediate(resolve));
  const retry = await post(app, 'k');
  const conflict = assertError(retry, 409, 'idempotency_conflict', 'Idempotency-Key');
  assert.ok(conflict.includes('still being processed'));
  assert.equal(retry.headers['retry-after'], '1');
  release();
  assert.equal((await first).statusCode, 201);
  assert.equal((await post(app, 'k')).headers['idempotent-replayed'], 'true');
  assert.equal(await countPets(app), 1);
});

test('50 simultaneous requests with one key over real connections create exactly one animal', async (t) => {
  const app = await startApp(t);
  await app.app.listen({ host: '127.0.0.1', port: 0 });
  const { port } = app.app.server.address() as AddressInfo;
  const responses = await Promise.all(
    Array.from({ length: 50 }, () =>
      fetch(`http://127.0.0.1:${port}/v1/pets`, {
        method: 'POST',
        headers: { authorization: `Bearer ${app.key}`, 'content-type': 'application/json', 'idempotency-key': 'once' },
        body: REX,
      }).then(async (response) => ({ status: response.status, body: await response.text() })),
    ),
  );
  assert.equal(await countPets(app), 1);
  const created = responses.filter((response) => response.status === 201);
  assert.ok(created.length >= 1);
  assert.ok(created.every((response) => response.body === created[0]!.body));
  assert.ok(
    responses.every((response) => response.status === 201 || response.status === 409),
    responses.map((r) => r.status).join(','),
  );
});
