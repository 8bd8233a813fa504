import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { assertError, postRaw, startApp } from './helpers.js';
import { freshPostgresStore, postgresSkip } from './stores.js';

describe('the service on PostgreSQL', () => {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) => test(name, { skip: postgresSkip }, fn);

  it('keeps int64 max and min categoryId exact through createPet, getPet and listPets', async (t) => {
    const app = await startApp(t, { store: await freshPostgresStore(t) });
    const max = await postRaw(app, '{"name":"Max","categoryId":9223372036854775807}');
    assert.equal(max.statusCode, 201);
    assert.equal(max.headers.location, '/v1/pets/1');
    assert.equal(max.body, '{"id":1,"name":"Max","categoryId":9223372036854775807,"status":"available"}');
    const min = await postRaw(app, '{"name":"Min","categoryId":-9223372036854775808,"status":"sold"}');
    assert.equal(min.body, '{"id":2,"name":"Min","categoryId":-9223372036854775808,"status":"sold"}');

    const got = await app.call({ method: 'GET', url: '/v1/pets/1' });
    assert.equal(got.statusCode, 200);
    assert.equal(got.body, max.body);
    const listed = await app.call({ method: 'GET', url: '/v1/pets' });
    assert.equal(listed.statusCode, 200);
    assert.equal(listed.body, `[${max.body},${min.body}]`);
  });

  it('follows Link rel="next" through every animal exactly once, in order', async (t) => {
    const app = await startApp(t, { store: await freshPostgresStore(t) });
    for (let i = 1; i <= 5; i++) await postRaw(app, `{"name":"Pet ${i}","categoryId":${i},"status":"pending"}`);
    await postRaw(app, '{"name":"Other","categoryId":6,"status":"sold"}');

    const ids: number[] = [];
    let url: string | undefined = '/v1/pets?limit=2&status=pending';
    for (let page = 0; url && page < 10; page++) {
      const response = await app.call({ method: 'GET', url });
      assert.equal(response.statusCode, 200);
      ids.push(...(response.json() as { id: number }[]).map((pet) => pet.id));
      const link = /^<([^>]+)>; rel="next"$/.exec(String(response.headers.link ?? ''));
      url = link ? link[1] : undefined;
    }
    assert.deepEqual(ids, [1, 2, 3, 4, 5]);
  });

  it('answers 404 for an id no animal has, and /readyz is ready', async (t) => {
    const app = await startApp(t, { store: await freshPostgresStore(t) });
    assertError(await app.call({ method: 'GET', url: '/v1/pets/9223372036854775807' }), 404, 'not_found');
    const ready = await app.app.inject({ method: 'GET', url: '/readyz' });
    assert.equal(ready.statusCode, 200);
  });

  it('refuses a key once it is revoked', async (t) => {
    const app = await startApp(t, { store: await freshPostgresStore(t) });
    assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
    const [key] = await app.store.listKeys();
    assert.equal(await app.store.revokeKey(key!.id, new Date()), true);
    assertError(await app.call({ method: 'GET', url: '/v1/pets' }), 401, 'unauthorized');
  });
});
