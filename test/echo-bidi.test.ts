import assert from 'node:assert/strict';
import { test } from 'node:test';
import { oneLine } from '../src/errors.js';
import { startApp } from './helpers.js';

test('messages that echo input show bidirectional controls by code point', async (t) => {
  const controls = ['\u202a', '\u202b', '\u202c', '\u202d', '\u202e', '\u2066', '\u2067', '\u2068', '\u2069'];
  assert.equal(oneLine(controls.join('')), 'U+202AU+202BU+202CU+202DU+202EU+2066U+2067U+2068U+2069');
  const app = await startApp(t);
  const bidi = /[\u202a-\u202e\u2066-\u2069]/;
  // An unknown field whose name hides its end behind a right-to-left override.
  const field = await app.call({
    method: 'POST',
    url: '/v1/pets',
    headers: { 'content-type': 'application/json' },
    payload: '{"name":"Rex","categoryId":7,"admin\u202e\u2066":true}',
  });
  assert.equal(field.statusCode, 400);
  const { message } = JSON.parse(field.body) as { message: string };
  assert.doesNotMatch(message, bidi);
  assert.match(message, /adminU\+202EU\+2066/);
  // A query parameter, and a value the JSON parser quotes.
  for (const request of [
    { method: 'GET' as const, url: `/v1/pets?${encodeURIComponent('x\u202ey')}=1` },
    {
      method: 'POST' as const,
      url: '/v1/pets',
      headers: { 'content-type': 'application/json' },
      payload: '{"name": \u202e}',
    },
  ]) {
    const response = await app.call(request);
    assert.equal(response.statusCode, 400, response.body);
    assert.doesNotMatch(JSON.parse(response.body).message as string, bidi, response.body);
  }
});
