import assert from 'node:assert/strict';
import { test } from 'node:test';
import { DocumentChecker, type WireResponse } from './fuzz/document.js';
import { startApp } from './helpers.js';

const json = { 'content-type': 'application/json; charset=utf-8' };
const answer = (status: number, body: string, headers: Record<string, string> = json): WireResponse => ({
  status,
  headers,
  body,
});

test('the document checker refuses answers the served document does not allow', async (t) => {
  const { app } = await startApp(t);
  const checker = new DocumentChecker(JSON.parse((await app.inject({ url: '/v1/openapi.json' })).body));
  const pet = '{"id":1,"name":"Rex","categoryId":9223372036854775807,"status":"available"}';
  const error = (code: string, status: number) => `{"code":"${code}","message":"m","status":${status}}`;

  assert.equal(checker.check('GET', '/v1/pets/1', answer(200, pet)), undefined);
  assert.equal(checker.check('HEAD', '/v1/pets', answer(200, '')), undefined);
  assert.equal(checker.check('GET', '/v1/nowhere', answer(404, error('not_found', 404))), undefined);
  assert.equal(
    checker.check('PUT', '/v1/pets', answer(405, error('method_not_allowed', 405), { ...json, allow: 'GET' })),
    undefined,
  );

  const refused: [string, string, WireResponse, RegExp][] = [
    ['GET', '/v1/pets/1', answer(500, error('internal_error', 500)), /answered 500/],
    ['GET', '/v1/pets/1', answer(415, error('unsupported_media_type', 415)), /does not list/],
    ['GET', '/v1/pets/1', answer(200, pet.replace('"id":1', '"id":"1"')), /does not match/],
    ['GET', '/v1/pets/1', answer(200, pet.replace('807', '808')), /does not match/],
    ['GET', '/v1/pets', answer(200, `[${pet.replace('}', ',"extra":1}')}]`), /does not match/],
    ['GET', '/v1/pets/1', answer(200, pet, { 'content-type': 'text/plain' }), /Content-Type/],
    ['GET', '/v1/pets/1', answer(200, pet.slice(0, -1)), /not JSON/],
    ['HEAD', '/v1/pets', answer(200, '[]'), /a body where none belongs/],
    ['POST', '/v1/pets', answer(400, error('invalid_request', 404)), /catalogue/],
    ['POST', '/v1/pets', answer(400, error('not_found', 400)), /catalogue/],
    ['GET', '/v1/nowhere', answer(200, '[]'), /outside the document/],
    ['PUT', '/v1/pets', answer(405, error('method_not_allowed', 405)), /Allow/],
    ['GET', '/v1/pets', answer(429, error('rate_limited', 429), { ...json, 'retry-after': '5' }), /a 429 without/],
    [
      'POST',
      '/v1/pets',
      answer(400, error('invalid_request', 400).replace('"m"', '"a\\nb"')),
      /one short printable line|does not match the document/,
    ],
    [
      'POST',
      '/v1/pets',
      answer(400, error('invalid_request', 400).replace('"m"', '"\u0085"')),
      /one short printable line|does not match the document/,
    ],
    [
      'POST',
      '/v1/pets',
      answer(400, error('invalid_request', 400).replace('"m"', '"\\ud800"')),
      /one short printable line|does not match the document/,
    ],
    [
      'POST',
      '/v1/pets',
      answer(400, error('invalid_request', 400).replace('"m"', `"${'m'.repeat(500)}"`)),
      /one short printable line|does not match the document/,
    ],
  ];
  for (const [method, url, response, problem] of refused) {
    assert.match(checker.check(method, url, response) ?? 'accepted', problem, `${method} ${url} ${response.body}`);
  }
});
