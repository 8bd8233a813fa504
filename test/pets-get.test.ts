import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { LightMyRequestResponse } from 'fastify';
import { assertError, postRaw, startApp } from './helpers.js';

const SUNSET = 'Thu, 05 Dec 2030 00:00:00 GMT';
const SUCCESSOR = '</v1/pets>; rel="successor-version"';

function assertDeprecated(response: LightMyRequestResponse, deprecation = '@1767225600') {
  assert.equal(response.headers.deprecation, deprecation);
  assert.equal(response.headers.sunset, SUNSET);
  assert.equal(response.headers.link, SUCCESSOR);
}

test('returns 200 and the Pet, with Deprecation, Sunset and successor Link headers', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  await postRaw(app, '{"name":"Tom","categoryId":-9223372036854775808,"status":"sold"}');
  const first = await app.call({ method: 'GET', url: '/v1/pets/1' });
  assert.equal(first.statusCode, 200);
  assert.match(String(first.headers['content-type']), /^application\/json(;|$)/);
  assert.equal(first.body, '{"id":1,"name":"Rex","categoryId":7,"status":"available"}');
  assertDeprecated(first);
  const second = await app.call({ method: 'GET', url: '/v1/pets/2' });
  assert.equal(second.body, '{"id":2,"name":"Tom","categoryId":-9223372036854775808,"status":"sold"}');
  assertDeprecated(second);
});

test('returns 404 with the deprecation headers when no animal has the id', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  for (const id of ['2', '999', '9223372036854775807']) {
    const response = await app.call({ method: 'GET', url: `/v1/pets/${id}` });
    assertError(response, 404, 'not_found');
    assertDeprecated(response);
  }
});

test('returns 404 with the deprecation headers when petId is not a positive int64 in digits', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  const ids = [
    '',
    'abc',
    '1.5',
    '7.0',
    '1.0',
    '-1',
    '0',
    '00',
    '+1',
    '1e0',
    '0x1',
    '%201',
    '1%20',
    '１',
    '12345678901234567890',
    '9223372036854775808',
    '99999999999999999999999999999999999999',
    'null',
  ];
  for (const id of ids) {
    const response = await app.call({ method: 'GET', url: `/v1/pets/${id}` });
    try {
      assertError(response, 404, 'not_found');
      assertDeprecated(response);
    } catch (error) {
      throw new Error(`petId ${id}: ${(error as Error).message}`, { cause: error });
    }
  }
});

test('returns 404 for a petId far longer than any int64', async (t) => {
  const app = await startApp(t);
  for (const id of ['1'.repeat(101), '1'.repeat(500), 'a'.repeat(8000)]) {
    const response = await app.call({ method: 'GET', url: `/v1/pets/${id}` });
    assertError(response, 404, 'not_found');
    assertDeprecated(response);
  }
});

test('returns 404 with the Error body when petId is not valid percent-encoding', async (t) => {
  const app = await startApp(t);
  for (const id of ['%zz', '%E0%A4%A', '%C0%AF', '%']) {
    const response = await app.call({ method: 'GET', url: `/v1/pets/${id}` });
    const message = assertError(response, 404, 'not_found');
    assert.ok(!message.includes(id), `the message echoes the path: ${message}`);
  }
});

test('takes the Deprecation date from PETSTORE_GETPET_DEPRECATION', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_GETPET_DEPRECATION: '@1700000000' } });
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  assertDeprecated(await app.call({ method: 'GET', url: '/v1/pets/1' }), '@1700000000');
  assertDeprecated(await app.call({ method: 'GET', url: '/v1/pets/2' }), '@1700000000');
});

test('refuses a Deprecation date after the sunset, naming the variable', async (t) => {
  await assert.rejects(
    startApp(t, { env: { PETSTORE_GETPET_DEPRECATION: '@1922659201' } }),
    /PETSTORE_GETPET_DEPRECATION/,
  );
  await assert.rejects(
    startApp(t, { env: { PETSTORE_GETPET_DEPRECATION: '1767225600' } }),
    /PETSTORE_GETPET_DEPRECATION/,
  );
  const atSunset = await startApp(t, { env: { PETSTORE_GETPET_DEPRECATION: '@1922659200' } });
  assertDeprecated(await atSunset.call({ method: 'GET', url: '/v1/pets/1' }), '@1922659200');
});

test('answers 200 one millisecond before the sunset', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  app.clock.set(Date.UTC(2030, 11, 5) - 1);
  const response = await app.call({ method: 'GET', url: '/v1/pets/1' });
  assert.equal(response.statusCode, 200);
  assertDeprecated(response);
});

test('returns 410 gone from the sunset instant on, for any petId', async (t) => {
  const app = await startApp(t);
  await postRaw(app, '{"name":"Rex","categoryId":7}');
  for (const now of [Date.UTC(2030, 11, 5), Date.UTC(2030, 11, 5) + 1, Date.UTC(2040, 0, 1)]) {
    app.clock.set(now);
    for (const id of ['1', '2', 'abc']) {
      const response = await app.call({ method: 'GET', url: `/v1/pets/${id}` });
      assertError(response, 410, 'gone', '/v1/pets');
    }
  }
});

test('keeps listPets and createPet working after the sunset', async (t) => {
  const app = await startApp(t);
  app.clock.set(Date.UTC(2031, 0, 1));
  assert.equal((await postRaw(app, '{"name":"Rex","categoryId":7}')).statusCode, 201);
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
});

test('listPets and createPet carry no Deprecation, Sunset or successor Link, even on errors', async (t) => {
  const app = await startApp(t);
  const responses = [
    await postRaw(app, '{"name":"Rex","categoryId":7}'),
    await postRaw(app, '{"name":"","categoryId":7}'),
    await app.call({ method: 'GET', url: '/v1/pets' }),
    await app.call({ method: 'GET', url: '/v1/pets?limit=0' }),
  ];
  for (const response of responses) {
    assert.equal(response.headers.deprecation, undefined);
    assert.equal(response.headers.sunset, undefined);
    assert.equal(response.headers.link, undefined);
  }
});

test('a malformed petId is a 404 whose message names petId and its rule', async (t) => {
  const app = await startApp(t);
  for (const petId of ['abc', '-1', '0', '1.5', '99999999999999999999']) {
    const response = await app.call({ method: 'GET', url: `/v1/pets/${petId}` });
    assert.equal(
      response.body,
      '{"code":"not_found","message":"Nothing is at this path: petId is the id of an animal, a positive int64 written in decimal digits.","status":404}',
      petId,
    );
  }
});
