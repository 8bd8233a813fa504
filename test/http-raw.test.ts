import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { answerClientError } from '../src/http/client-errors.js';
import { startApp } from './helpers.js';
import { assertRawError, exchange, parseResponse } from './raw.js';

/**
 * The whole app listening on a real socket, so Node's own HTTP parser sees every byte.
 * `exchange` half-closes after writing, as `printf … | nc` does.
 */
async function listen(t: TestContext) {
  const app = await startApp(t);
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  return { ...app, port };
}

test('returns 431 with the Error body when the request headers are over 16 KiB in all', async (t) => {
  const { port } = await listen(t);
  const oneBig = `GET /v1/pets HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(17 * 1024)}\r\n\r\n`;
  assertRawError(
    await exchange(port, oneBig),
    'HTTP/1.1 431 Request Header Fields Too Large',
    'headers_too_large',
    431,
  );
  const many = Array.from({ length: 40 }, (_, i) => `X-Part-${i}: ${'b'.repeat(500)}\r\n`).join('');
  const manySmall = `GET /v1/pets HTTP/1.1\r\nHost: x\r\n${many}\r\n`;
  assertRawError(
    await exchange(port, manySmall),
    'HTTP/1.1 431 Request Header Fields Too Large',
    'headers_too_large',
    431,
  );
});

test('answers a request whose headers stay under 16 KiB in all', async (t) => {
  const { port, key } = await listen(t);
  const request =
    `GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `X-Padding: ${'a'.repeat(15 * 1024)}\r\nConnection: close\r\n\r\n`;
  const response = parseResponse(await exchange(port, request));
  assert.equal(response.statusLine, 'HTTP/1.1 200 OK');
  assert.equal(response.body, '[]');
});

test('returns 400 with the Error body for a method the HTTP parser does not know', async (t) => {
  const { port } = await listen(t);
  for (const method of ['BREW', 'FOO', 'GETS']) {
    const raw = await exchange(port, `${method} /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n`);
    assertRawError(raw, 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
  }
});

test('returns 400 with the Error body for a request that is not HTTP at all', async (t) => {
  const { port } = await listen(t);
  assertRawError(await exchange(port, 'hello\r\n\r\n'), 'HTTP/1.1 400 Bad Request', 'invalid_request', 400);
});

test('returns 413 with the Error body when Content-Length announces more than 16 KiB', async (t) => {
  const { port, key } = await listen(t);
  const request =
    `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    'Content-Type: application/json\r\nContent-Length: 20000\r\nConnection: close\r\n\r\n' +
    ' '.repeat(20000);
  assertRawError(await exchange(port, request), 'HTTP/1.1 413 Payload Too Large', 'payload_too_large', 413);
});

test('returns 413 with the Error body for a chunked body over 16 KiB', async (t) => {
  const { port, key, call } = await listen(t);
  const chunk = ' '.repeat(4096);
  const chunks = Array.from({ length: 5 }, () => `1000\r\n${chunk}\r\n`).join('');
  const request =
    `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    'Content-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n' +
    chunks +
    '0\r\n\r\n';
  assertRawError(await exchange(port, request), 'HTTP/1.1 413 Payload Too Large', 'payload_too_large', 413);
  assert.equal((await call({ method: 'GET', url: '/v1/pets' })).body, '[]');
});

test('returns 401, not 413, for an unauthenticated oversized body on a real socket', async (t) => {
  const { port } = await listen(t);
  const request =
    'POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
    'Content-Length: 20000\r\nConnection: close\r\n\r\n' +
    ' '.repeat(20000);
  const response = assertRawError(await exchange(port, request), 'HTTP/1.1 401 Unauthorized', 'unauthorized', 401);
  assert.equal(response.headers.get('www-authenticate'), 'Bearer realm="petstore"');
});

test('creates an animal from a raw request and answers with the exact bytes', async (t) => {
  const { port, key } = await listen(t);
  const body = '{"name":"Rex","categoryId":9223372036854775807}';
  const request =
    `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n${body}`;
  const response = parseResponse(await exchange(port, request));
  assert.equal(response.statusLine, 'HTTP/1.1 201 Created');
  assert.equal(response.headers.get('location'), '/v1/pets/1');
  assert.equal(response.body, '{"id":1,"name":"Rex","categoryId":9223372036854775807,"status":"available"}');
});

test('answers every request a client sent before half-closing its side, pipelined ones too', async (t) => {
  const { port, key } = await listen(t);
  const auth = `Host: x\r\nAuthorization: Bearer ${key}\r\n`;
  const body = '{"name":"Rex","categoryId":7}';
  const created = await exchange(
    port,
    `POST /v1/pets HTTP/1.1\r\n${auth}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
  );
  assert.equal(parseResponse(created).statusLine, 'HTTP/1.1 201 Created');
  // RFC 9112 9.3.2: pipelined requests are answered in order; only safe ones are pipelined.
  const raw = await exchange(port, `GET /v1/pets HTTP/1.1\r\n${auth}\r\nGET /v1/pets/99 HTTP/1.1\r\n${auth}\r\n`);
  const [listed, missing] = raw.split(/(?=HTTP\/1\.1 )/);
  const list = parseResponse(listed!);
  assert.equal(list.statusLine, 'HTTP/1.1 200 OK');
  assert.equal(list.body, '[{"id":1,"name":"Rex","categoryId":7,"status":"available"}]');
  assertRawError(missing!, 'HTTP/1.1 404 Not Found', 'not_found', 404);
});

// Node counts the request line towards the 16 KiB header limit, so a longer one is a 431 before
// any route could answer 414.
test('answers a request line over 16 KiB with the 431 Error body', async (t) => {
  const { port } = await listen(t);
  for (const url of [`/v1/pets/${'1'.repeat(17_000)}`, `/v1/pets?limit=${'1'.repeat(70_000)}`]) {
    const raw = await exchange(port, `GET ${url} HTTP/1.1\r\nHost: x\r\n\r\n`);
    assertRawError(raw, 'HTTP/1.1 431 Request Header Fields Too Large', 'headers_too_large', 431);
  }
});

test('answers a request that times out with the 408 Error body', async (t) => {
  // The error Node's HTTP server reports when requestTimeout or headersTimeout runs out.
  const timeout = Object.assign(new Error('Request timeout'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
  const server = createServer((socket) => answerClientError(timeout, socket));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  const { port } = server.address() as AddressInfo;
  const raw = await exchange(port, 'GET /v1/pets HTTP/1.1\r\nHost: x\r\n');
  assertRawError(raw, 'HTTP/1.1 408 Request Timeout', 'request_timeout', 408);
});
