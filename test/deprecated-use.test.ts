import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { KEY_USE_WRITE_MS } from '../src/keys/uses.js';
import { addPet, appCountingWrites, startApp } from './helpers.js';
import { runKeys } from './in-process.js';
import { childEnv, runCli, startServer } from './process.js';
import { storeKinds } from './stores.js';

const FLUSH_MS = 20;

/** Waits until `count()` is `n`, a few seconds at most. */
async function until(count: () => Promise<number>, n: number) {
  const deadline = Date.now() + 7000;
  while ((await count()) !== n) {
    assert.ok(Date.now() < deadline, `never reached ${n} (at ${await count()})`);
    await sleep(10);
  }
}

for (const kind of storeKinds) {
  test(
    `${kind.name}: a key's last getPet call is written once a minute per instance; listPets and createPet are not deprecated uses`,
    { skip: kind.skip },
    async (t) => {
      const app = await appCountingWrites(t, kind, 'last_deprecated_use_at', FLUSH_MS);
      const { call, clock, store, writes } = app;
      const key = async () => (await store.listKeys())[0]!;
      const pet = await addPet(app);
      for (let i = 0; i < 5; i++) assert.equal((await call({ url: '/v1/pets' })).statusCode, 200);
      await until(async () => ((await key()).lastUsedAt === null ? 0 : 1), 1);
      assert.equal((await key()).lastDeprecatedUseAt, null);
      assert.equal(await writes(), 0);

      const t0 = clock.now();
      for (let i = 0; i < 30; i++) assert.equal((await call({ url: `/v1/pets/${pet.id}` })).statusCode, 200);
      await until(writes, 1);
      assert.equal((await key()).lastDeprecatedUseAt?.getTime(), t0);

      clock.set(t0 + KEY_USE_WRITE_MS - 1);
      // A 404 from getPet is a call of the deprecated operation too.
      for (let i = 0; i < 30; i++) assert.equal((await call({ url: `/v1/pets/${pet.id + 1}` })).statusCode, 404);
      await sleep(FLUSH_MS * 10);
      assert.equal(await writes(), 1, 'no second write within the minute');

      clock.set(t0 + KEY_USE_WRITE_MS);
      assert.equal((await call({ url: `/v1/pets/${pet.id}` })).statusCode, 200);
      await until(writes, 2);
      assert.equal((await key()).lastDeprecatedUseAt?.getTime(), t0 + KEY_USE_WRITE_MS);
    },
  );
}

test('/metrics counts getPet calls in petstore_deprecated_requests_total, from 0; listPets and createPet are not counted', async (t) => {
  const app = await startApp(t);
  const { call } = app;
  const counted = async () => {
    const text = (await call({ url: '/metrics' })).body;
    const match = /^petstore_deprecated_requests_total\{operation="getPet"\} ([0-9]+)$/m.exec(text);
    assert.ok(match, 'the series is exposed');
    assert.match(text, /^# TYPE petstore_deprecated_requests_total counter$/m);
    return Number(match[1]);
  };
  assert.equal(await counted(), 0);
  const pet = await addPet(app);
  await call({ url: '/v1/pets' });
  assert.equal(await counted(), 0, 'listPets and createPet are not deprecated');
  await call({ url: `/v1/pets/${pet.id}` });
  await call({ url: `/v1/pets/${pet.id + 1}` });
  await call({ method: 'HEAD', url: `/v1/pets/${pet.id}` });
  assert.equal(await counted(), 3);
  // Refused before the operation runs: not a call by a client to move.
  await app.app.inject({ url: `/v1/pets/${pet.id}`, headers: { authorization: 'Bearer psk_unknown' } });
  assert.equal(await counted(), 3);
});

test('keys list shows when each key last called getPet, to the minute, written by the service as it stops', async (t) => {
  const env = childEnv(t);
  const server = await startServer(t, env);
  const [, first] = await server.waitForOutput(/^ {4}(psk_[A-Za-z0-9_-]{43})$/m);
  const other = await runKeys(['create', '--name', 'modern', '--json'], env);
  assert.equal(other.code, 0, other.stderr);
  const modern = (JSON.parse(other.stdout) as { key: string }).key;
  const get = (key: string, path: string) =>
    fetch(`${server.url}${path}`, { headers: { authorization: `Bearer ${key}` } });
  const before = Date.now();
  assert.equal((await get(first!, '/v1/pets/1')).status, 404);
  assert.equal((await get(modern, '/v1/pets')).status, 200);
  // SIGTERM: the service writes the uses it holds before it exits.
  server.child.kill('SIGTERM');
  assert.equal((await server.exited).code, 0);

  const listed = await runCli(['keys', 'list', '--json'], env);
  assert.equal(listed.code, 0, listed.stderr);
  const [old, current] = listed.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as { name: string; lastUsedAt: string | null; lastDeprecatedUseAt: string | null });
  assert.equal(old!.name, 'first');
  assert.match(old!.lastDeprecatedUseAt!, /T[0-9]{2}:[0-9]{2}:00\.000Z$/, 'to the minute');
  assert.ok(
    Date.parse(old!.lastDeprecatedUseAt!) > before - 60_000 && Date.parse(old!.lastDeprecatedUseAt!) <= Date.now(),
  );
  assert.equal(current!.lastDeprecatedUseAt, null);
  assert.notEqual(current!.lastUsedAt, null);

  const table = await runCli(['keys', 'list'], env);
  const [header, row] = table.stdout.split('\n');
  assert.equal(header, 'ID\tNAME\tKEY\tSCOPES\tCREATED\tEXPIRES\tSTATE\tLAST USED\tLAST DEPRECATED USE');
  assert.match(row!, /\tfirst\t.*\t[0-9T:-]{16}Z\t[0-9T:-]{16}Z$/);
});
