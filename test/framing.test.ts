import assert from 'node:assert/strict';
import { test } from 'node:test';
import { listeningApp } from './helpers.js';
import { assertRawError, exchange, parseResponse } from './raw.js';

const BODY = '{"name":"Rex","categoryId":7}';

/** A raw POST /v1/pets with `fields` (each line without its CRLF) and `body`. */
const post = (fields: string[], body = BODY, version = '1.1') =>
  `POST /v1/pets HTTP/${version}\r\n${fields.map((field) => `${field}\r\n`).join('')}\r\n${body}`;

test('returns 400 with the Error body, and closes the connection, for a request with two Host fields', async (t) => {
  const app = await listeningApp(t);
  for (const hosts of [
    ['Host: a', 'Host: b'],
    ['Host: a', 'host: a'],
  ]) {
    const raw = await exchange(
      app.port,
      `GET /v1/pets HTTP/1.1\r\n${hosts.join('\r\n')}\r\nAuthorization: Bearer ${app.key}\r\n\r\n` +
        `GET /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${app.key}\r\n\r\n`,
    );
    const response = assertRawError(raw, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
    assert.match(response.body, /more than one Host header/);
    assert.equal(response.headers.get('connection'), 'close');
    // The request after it on the connection is never read.
    assert.equal(raw.split('HTTP/1.1 ').length, 2);
  }
  const one = await exchange(app.port, `GET /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${app.key}\r\n\r\n`);
  assert.equal(parseResponse(one).statusLine, 'HTTP/1.1 200 OK');
});

test('returns 400, not 401 nor 200, for a request with two Authorization fields, whichever comes first', async (t) => {
  const app = await listeningApp(t);
  for (const pair of [
    [`Bearer ${app.key}`, 'Bearer psk_wrong'],
    ['Bearer psk_wrong', `Bearer ${app.key}`],
    [`Bearer ${app.key}`, `Bearer ${app.key}`],
  ]) {
    const raw = await exchange(
      app.port,
      `GET /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: ${pair[0]}\r\nAuthorization: ${pair[1]}\r\n\r\n`,
    );
    const response = assertRawError(raw, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
    assert.match(response.body, /more than one Authorization header/);
  }
  const created = await exchange(
    app.port,
    post([
      'Host: a',
      `Authorization: Bearer ${app.key}`,
      'Content-Type: application/json',
      `Content-Length: ${BODY.length}`,
      'Authorization: Basic eDp5',
    ]),
  );
  assertRawError(created, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
  assert.deepEqual(await app.store.listPets({ limit: 10 }), []);
});

test('returns 400 for Transfer-Encoding in an HTTP/1.0 request, and stores nothing', async (t) => {
  const app = await listeningApp(t);
  const chunked = `${BODY.length.toString(16)}\r\n${BODY}\r\n0\r\n\r\n`;
  for (const encoding of ['chunked', 'identity', 'gzip, chunked']) {
    const raw = await exchange(
      app.port,
      post(
        [
          'Host: a',
          `Authorization: Bearer ${app.key}`,
          'Content-Type: application/json',
          `Transfer-Encoding: ${encoding}`,
        ],
        chunked,
        '1.0',
      ),
    );
    // The parser may refuse what follows too (a body it cannot frame): a second 400, never a 2xx.
    const [first, ...more] = raw.split(/(?=HTTP\/1\.1 )/);
    const response = assertRawError(first!, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
    assert.match(response.body, /HTTP\/1\.0 and has a Transfer-Encoding header/);
    for (const other of more) assert.match(other, /^HTTP\/1\.1 400 /);
  }
  assert.deepEqual(await app.store.listPets({ limit: 10 }), []);
  // HTTP/1.0 with Content-Length is served, and HTTP/1.1 chunked too.
  const plain = await exchange(
    app.port,
    post(
      [
        'Host: a',
        `Authorization: Bearer ${app.key}`,
        'Content-Type: application/json',
        `Content-Length: ${BODY.length}`,
      ],
      BODY,
      '1.0',
    ),
  );
  assert.equal(parseResponse(plain).statusLine, 'HTTP/1.1 201 Created');
  const chunked11 = await exchange(
    app.port,
    post(
      ['Host: a', `Authorization: Bearer ${app.key}`, 'Content-Type: application/json', 'Transfer-Encoding: chunked'],
      chunked,
    ),
  );
  assert.equal(parseResponse(chunked11).statusLine, 'HTTP/1.1 201 Created');
});

test('returns 400 with the Error body, and closes the connection, for a request line with HTTP/2.0 or no version', async (t) => {
  const app = await listeningApp(t);
  for (const [line, mention] of [
    ['GET /healthz HTTP/2.0', 'HTTP/2.0'],
    ['GET /healthz', 'no HTTP version'],
    ['GET /healthz HTTP/0.9', 'HTTP/0.9'],
  ] as const) {
    const raw = await exchange(app.port, `${line}\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n`);
    const response = assertRawError(raw, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
    assert.ok(response.body.includes(mention), response.body);
    assert.equal(response.headers.get('connection'), 'close');
    // Nothing after it: the request behind it is not answered.
    assert.equal(raw.split('HTTP/1.1 ').length - 1, 1);
  }
  const ok = await exchange(app.port, 'GET /healthz HTTP/1.0\r\n\r\n');
  assert.match(ok, /^HTTP\/1\.1 200 OK\r\n/);
});
