import assert from 'node:assert/strict';
import { test } from 'node:test';
import { postRaw, startApp } from './helpers.js';

test('createPet returns 201, the full Pet and its Location', async (t) => {
  const { call } = await startApp(t);
  const response = await call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 7 } });
  assert.equal(response.statusCode, 201);
  assert.equal(response.headers.location, '/v1/pets/1');
  assert.match(String(response.headers['content-type']), /^application\/json(;|$)/);
  assert.equal(response.body, '{"id":1,"name":"Rex","categoryId":7,"status":"available"}');
});

test('createPet makes an animal without a status available', async (t) => {
  const app = await startApp(t);
  const response = await postRaw(app, '{"categoryId":3,"name":"Tom"}');
  assert.equal(response.statusCode, 201);
  assert.equal(response.body, '{"id":1,"name":"Tom","categoryId":3,"status":"available"}');
});

test('createPet keeps each status it is given', async (t) => {
  const app = await startApp(t);
  const bodies = [];
  for (const status of ['available', 'pending', 'sold']) {
    const response = await postRaw(app, JSON.stringify({ name: 'Rex', categoryId: 1, status }));
    assert.equal(response.statusCode, 201);
    bodies.push(response.body);
  }
  assert.deepEqual(bodies, [
    '{"id":1,"name":"Rex","categoryId":1,"status":"available"}',
    '{"id":2,"name":"Rex","categoryId":1,"status":"pending"}',
    '{"id":3,"name":"Rex","categoryId":1,"status":"sold"}',
  ]);
});

test('createPet assigns positive ids that increase in creation order, each with its Location', async (t) => {
  const app = await startApp(t);
  for (let id = 1; id <= 5; id++) {
    const response = await postRaw(app, `{"name":"Pet ${id}","categoryId":${id}}`);
    assert.equal(response.statusCode, 201);
    assert.equal(response.headers.location, `/v1/pets/${id}`);
    assert.equal(response.body, `{"id":${id},"name":"Pet ${id}","categoryId":${id},"status":"available"}`);
  }
});

test('the created Pet is the one getPet and listPets return, byte for byte', async (t) => {
  const app = await startApp(t);
  const created = await postRaw(app, '{"name":"Zoë 🐈","categoryId":9223372036854775807,"status":"sold"}');
  assert.equal(created.statusCode, 201);
  const got = await app.call({ method: 'GET', url: created.headers.location as string });
  assert.equal(got.statusCode, 200);
  assert.equal(got.body, created.body);
  const listed = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(listed.body, `[${created.body}]`);
});

test('createPet accepts a body with surrounding white space and any key order', async (t) => {
  const app = await startApp(t);
  const response = await postRaw(app, ' \n\t{ "status" : "pending" ,\r\n "categoryId" : 4 , "name" : "Rex" }\n ');
  assert.equal(response.statusCode, 201);
  assert.equal(response.body, '{"id":1,"name":"Rex","categoryId":4,"status":"pending"}');
});

test('createPet accepts escaped characters in name and returns the same string', async (t) => {
  const app = await startApp(t);
  const response = await postRaw(app, '{"name":"R\\u0065x \\"the\\" \\/ \\\\ \\ud83d\\ude00","categoryId":1}');
  assert.equal(response.statusCode, 201);
  assert.equal(JSON.parse(response.body).name, 'Rex "the" / \\ 😀');
});

test('createPet carries no deprecation headers', async (t) => {
  const app = await startApp(t);
  const response = await postRaw(app, '{"name":"Rex","categoryId":7}');
  assert.equal(response.statusCode, 201);
  assert.equal(response.headers.deprecation, undefined);
  assert.equal(response.headers.sunset, undefined);
  assert.equal(response.headers.link, undefined);
});
