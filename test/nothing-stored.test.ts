import assert from 'node:assert/strict';
import { test } from 'node:test';
import Database from 'better-sqlite3';
import type { InjectOptions } from 'fastify';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { openSqliteStore } from '../src/store/sqlite.js';
import { postRaw, startApp, tempSqliteStore, type TestApp } from './helpers.js';

const JSON_TYPE = { 'content-type': 'application/json' };

/** Requests that must all be refused with a 4xx, none of which may store anything. */
function rejected(key: string): InjectOptions[] {
  const auth = { authorization: `Bearer ${key}` };
  const post = (payload: string | Buffer, headers: Record<string, string> = JSON_TYPE): InjectOptions => ({
    method: 'POST',
    url: '/v1/pets',
    headers: { ...auth, ...headers },
    payload,
  });
  return [
    post('{'),
    post(''),
    post('[]'),
    post('null'),
    post(Buffer.from([0x7b, 0xff, 0x7d])),
    post('{"name":"Rex","name":"Rex","categoryId":7}'),
    post('{"name":"Rex","categoryId":7,"id":100}'),
    post('{"name":"Rex","categoryId":7,"__proto__":{}}'),
    post('{"name":"","categoryId":7}'),
    post('{"name":" ","categoryId":7}'),
    post('{"name":"a\\u0000","categoryId":7}'),
    post('{"name":"\\ud800","categoryId":7}'),
    post(JSON.stringify({ name: 'a'.repeat(256), categoryId: 7 })),
    post('{"name":"Rex","categoryId":9223372036854775808}'),
    post('{"name":"Rex","categoryId":1.5}'),
    post('{"name":"Rex","categoryId":"7"}'),
    post('{"name":"Rex","categoryId":null}'),
    post('{"name":"Rex","categoryId":7,"status":"lost"}'),
    post('{"name":"Rex"}'),
    post('{"name":"Rex","categoryId":7}', { 'content-type': 'text/plain' }),
    post('{"name":"Rex","categoryId":7}', { 'content-type': 'application/json; charset=latin1' }),
    post('{"name":"Rex","categoryId":7}', {}),
    post(`{"name":"Rex","categoryId":7}${' '.repeat(20_000)}`),
    { method: 'POST', url: '/v1/pets', headers: JSON_TYPE, payload: '{"name":"Rex","categoryId":7}' },
    {
      method: 'POST',
      url: '/v1/pets',
      headers: { ...JSON_TYPE, authorization: 'Bearer psk_unknown' },
      payload: '{"name":"Rex","categoryId":7}',
    },
    { method: 'PUT', url: '/v1/pets', headers: { ...auth, ...JSON_TYPE }, payload: '{"name":"Rex","categoryId":7}' },
    { method: 'PATCH', url: '/v1/pets/1', headers: { ...auth, ...JSON_TYPE }, payload: '{"name":"Max"}' },
    { method: 'DELETE', url: '/v1/pets/1', headers: auth },
    { method: 'POST', url: '/v1/pets/1', headers: { ...auth, ...JSON_TYPE }, payload: '{"name":"Rex","categoryId":7}' },
    {
      method: 'POST',
      url: '/v1/animals',
      headers: { ...auth, ...JSON_TYPE },
      payload: '{"name":"Rex","categoryId":7}',
    },
  ];
}

async function assertAllRejected(app: TestApp) {
  for (const request of rejected(app.key)) {
    const response = await app.app.inject(request);
    assert.ok(
      response.statusCode >= 400 && response.statusCode < 500,
      `${request.method} ${request.url} ${String(request.payload).slice(0, 60)}: ${response.statusCode}`,
    );
  }
}

test('stores nothing when every request is refused', async (t) => {
  const app = await startApp(t);
  await assertAllRejected(app);
  const list = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(list.body, '[]');
  assert.deepEqual(await app.store.listPets({ limit: 1000 }), []);
  const created = await postRaw(app, '{"name":"Rex","categoryId":7}');
  assert.equal(created.headers.location, '/v1/pets/1');
});

test('ids keep counting from the last 201 after refused requests', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"One","categoryId":1}');
  await postRaw(app, '{"name":"Two","categoryId":2}');
  await assertAllRejected(app);
  const third = await postRaw(app, '{"name":"Three","categoryId":3}');
  assert.equal(third.body, '{"id":3,"name":"Three","categoryId":3,"status":"available"}');
  const list = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.deepEqual(
    (JSON.parse(list.body) as { name: string }[]).map((pet) => pet.name),
    ['One', 'Two', 'Three'],
  );
});

test('ids are never reused, across a restart and after the newest row is gone', async (t) => {
  const { path } = await tempSqliteStore(t);
  const config = loadConfig({});
  const serve = async () => {
    const store = openSqliteStore(path);
    await store.migrate();
    const app = await buildApp({ config, store, logger: false });
    const { key } = await issueKey(store, 'restart');
    const post = (name: string) =>
      app.inject({
        method: 'POST',
        url: '/v1/pets',
        headers: { authorization: `Bearer ${key}`, ...JSON_TYPE },
        payload: JSON.stringify({ name, categoryId: 1 }),
      });
    const close = async () => {
      await app.close();
      await store.close();
    };
    return { post, close };
  };

  const first = await serve();
  assert.equal((await first.post('a')).headers.location, '/v1/pets/1');
  assert.equal((await first.post('b')).headers.location, '/v1/pets/2');
  await first.close();

  const db = new Database(path);
  db.prepare('DELETE FROM pets WHERE id = 2').run();
  db.close();

  const second = await serve();
  t.after(second.close);
  assert.equal((await second.post('c')).headers.location, '/v1/pets/3');
});
