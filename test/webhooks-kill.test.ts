import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open.js';
import { childEnv, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';
import { createPetAt, holdingReceiver, prepareDatabase, startReceiver } from './webhooks.js';

test('SQLite: an event whose attempt a kill -9 cut off is delivered after the restart; SIGTERM waits for none beyond its grace', async (t) => {
  const receiver = await holdingReceiver(t);
  const env = childEnv(t, {
    PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
    PETSTORE_WEBHOOK_TIMEOUT_MS: '1500',
    PETSTORE_WEBHOOK_LEASE_MS: '2000',
    PETSTORE_WEBHOOK_RETRY_MS: '100',
  });
  const { key, secret } = await prepareDatabase(env, receiver.url);

  const first = await startServer(t, env);
  const created = await createPetAt(first.url, key, '{"name":"Rex","categoryId":9007199254740993}');
  assert.equal(created.status, 201);
  const [cut] = await receiver.waitFor(1);
  first.child.kill('SIGKILL');
  assert.equal((await first.exited).signal, 'SIGKILL');
  receiver.dropHeld();

  receiver.answer(true);
  const second = await startServer(t, env);
  const [, again] = await receiver.waitFor(2, 15_000);
  assert.equal(again!.headers['webhook-id'], cut!.headers['webhook-id'], 'the same event, once more');
  const event = new Webhook(secret).verify(again!.body, again!.headers as Record<string, string>) as {
    type: string;
  };
  assert.equal(event.type, 'pet.created');
  assert.ok(again!.body.includes('"categoryId":9007199254740993'), 'int64 exact');

  // SIGTERM with an attempt in flight: the process still exits 0 within the shutdown's bound.
  receiver.answer(false);
  const another = await createPetAt(second.url, key, '{"name":"Fido","categoryId":1}');
  assert.equal(another.status, 201);
  await receiver.waitFor(3);
  const started = Date.now();
  second.child.kill('SIGTERM');
  const { code } = await second.exited;
  assert.equal(code, 0);
  assert.ok(Date.now() - started < 9000, `exited ${Date.now() - started} ms after SIGTERM`);
  receiver.dropHeld();
});

test('an instance started with PETSTORE_WEBHOOK_DELIVERY=off serves the API and delivers nothing', async (t) => {
  const receiver = await startReceiver(t);
  const env = childEnv(t, { PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1', PETSTORE_WEBHOOK_DELIVERY: 'off' });
  const { key } = await prepareDatabase(env, receiver.url);
  const server = await startServer(t, env);
  const created = await createPetAt(server.url, key, '{"name":"Rex","categoryId":1}');
  assert.equal(created.status, 201);
  await new Promise((resolve) => setTimeout(resolve, 1500));
  assert.equal(receiver.received.length, 0);
  const store = await openStore(loadConfig(env));
  try {
    const [endpoint] = await store.webhooks.listEndpoints();
    assert.equal(endpoint!.waiting, 1, 'the event waits for an instance that delivers');
  } finally {
    await store.close();
  }
  server.child.kill('SIGTERM');
  assert.equal((await server.exited).code, 0);
});

test(
  'PostgreSQL: an attempt cut off by kill -9 of one instance is made by another instance once its lease expires',
  {
    skip: postgresSkip,
  },
  async (t) => {
    const receiver = await holdingReceiver(t);
    const env = childEnv(t, {
      DATABASE_URL: await createPostgresSchema(t),
      PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
      PETSTORE_WEBHOOK_TIMEOUT_MS: '1000',
      PETSTORE_WEBHOOK_LEASE_MS: '2000',
    });
    const { key } = await prepareDatabase(env, receiver.url);
    const doomed = await startServer(t, env);
    const created = await createPetAt(doomed.url, key, '{"name":"Rex","categoryId":1}', { 'idempotency-key': 'once' });
    assert.equal(created.status, 201);
    const [cut] = await receiver.waitFor(1);
    doomed.child.kill('SIGKILL');
    await doomed.exited;
    receiver.dropHeld();
    receiver.answer(true);
    const survivor = await startServer(t, env);
    const [, again] = await receiver.waitFor(2, 15_000);
    assert.equal(again!.headers['webhook-id'], cut!.headers['webhook-id']);
    await new Promise((resolve) => setTimeout(resolve, 500));
    assert.equal(receiver.received.length, 2, 'delivered, and not again');
    survivor.child.kill('SIGTERM');
    assert.equal((await survivor.exited).code, 0);
  },
);
