import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open.js';
import { childEnv, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';
import { createPetAt, prepareDatabase, startReceiver, until } from './webhooks.js';

const CONCURRENCY = 4;

/** Waits until the database `env` names has no event waiting: every attempt made again has been recorded. */
async function allRecorded(t: TestContext, env: Record<string, string>) {
  const store = await openStore(loadConfig(env));
  t.after(() => store.close());
  await until(async () => (await store.webhooks.stats()).waiting === 0, 15_000, 'every delivery recorded');
}

/**
 * The settings of a service for a receiver on loopback: CONCURRENCY attempts in flight at most,
 * short timeout and lease; on SQLite, or on a PostgreSQL schema of its own.
 */
async function repeatsEnv(t: TestContext, store: 'SQLite' | 'PostgreSQL') {
  return childEnv(t, {
    ...(store === 'PostgreSQL' ? { DATABASE_URL: await createPostgresSchema(t) } : {}),
    PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
    PETSTORE_WEBHOOK_CONCURRENCY: String(CONCURRENCY),
    PETSTORE_WEBHOOK_TIMEOUT_MS: '1500',
    PETSTORE_WEBHOOK_LEASE_MS: '2000',
    PETSTORE_WEBHOOK_RETRY_MS: '100',
  });
}

/** A receiver that answers 204 each request `delayMs` after it came; the ids it got, and how many times each. */
async function slowReceiver(t: TestContext, delayMs: number) {
  const receiver = await startReceiver(
    t,
    (_request, _index, response) => void setTimeout(() => response.writeHead(204).end(), delayMs),
  );
  const ids = () => receiver.received.map((request) => String(request.headers['webhook-id']));
  const repeats = () => ids().length - new Set(ids()).size;
  return { ...receiver, ids, repeats };
}

/**
 * A service on `store` delivering to a receiver answering after `delayMs`, `pets` created
 * through it; resolves once the receiver has got `inFlight` of them, with what the test stops
 * and starts again.
 */
async function delivering(
  t: TestContext,
  store: 'SQLite' | 'PostgreSQL',
  { delayMs, pets, inFlight }: { delayMs: number; pets: number; inFlight: number },
) {
  const receiver = await slowReceiver(t, delayMs);
  const env = await repeatsEnv(t, store);
  const { key } = await prepareDatabase(env, receiver.url);
  const server = await startServer(t, env);
  for (let i = 0; i < pets; i++) {
    assert.equal((await createPetAt(server.url, key, `{"name":"Rex ${i}","categoryId":${i}}`)).status, 201);
  }
  await receiver.waitFor(inFlight);
  return { receiver, env, server };
}

for (const store of ['SQLite', 'PostgreSQL'] as const) {
  const skip = store === 'PostgreSQL' && postgresSkip;

  test(`${store}: a kill -9 mid-delivery repeats at most the attempts in flight`, { skip }, async (t) => {
    const { receiver, env, server: first } = await delivering(t, store, { delayMs: 30, pets: 60, inFlight: 20 });
    first.child.kill('SIGKILL');
    await first.exited;
    // On SQLite the restarted service takes the leases back at once; on PostgreSQL once they expire.
    await startServer(t, env);
    await until(() => new Set(receiver.ids()).size === 60, 15_000, 'every event delivered');
    await allRecorded(t, env);
    t.diagnostic(`${receiver.repeats()} repeated`);
    assert.ok(receiver.repeats() <= CONCURRENCY, `${receiver.repeats()} events sent twice`);
  });

  test(
    `${store}: a stop (SIGTERM) waits for the attempts in flight and records them: none is repeated after the restart`,
    { skip },
    async (t) => {
      const {
        receiver,
        env,
        server: first,
      } = await delivering(t, store, {
        delayMs: 300,
        pets: 20,
        inFlight: CONCURRENCY + 1,
      });
      first.child.kill('SIGTERM');
      assert.equal((await first.exited).code, 0);
      await startServer(t, env);
      await until(() => new Set(receiver.ids()).size === 20, 15_000, 'every event delivered');
      assert.equal(receiver.repeats(), 0, 'no event sent twice');
    },
  );
}
