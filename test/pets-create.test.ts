import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApp } from './helpers.js';

test('createPet returns 201, the full Pet and its Location', async (t) => {
  const { call } = await startApp(t);
  const response = await call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 7 } });
  assert.equal(response.statusCode, 201);
  assert.equal(response.headers.location, '/v1/pets/1');
  assert.equal(response.body, '{"id":1,"name":"Rex","categoryId":7,"status":"available"}');
});
