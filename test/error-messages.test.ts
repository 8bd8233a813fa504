import assert from 'node:assert/strict';
import { PassThrough } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { test } from 'node:test';
import type { InjectOptions, LightMyRequestResponse } from 'fastify';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { ApiError, echo, ECHO_LIMIT, oneLine, toApiError } from '../src/errors.js';
import { issueKey } from '../src/keys/issue.js';
import { startApp, tempSqliteStore } from './helpers.js';
import { exchangeBytes, parseResponse } from './raw.js';

/** What no message may hold (docs/hardening.md#error-messages): a Cc character, a line separator, a lone surrogate. */
const UNPRINTABLE =
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Asserts a 4xx Error body whose message is one printable line of sane length; returns the message. */
function assertOneLine(response: LightMyRequestResponse | { statusCode: number; body: string }, status?: number) {
  if (status !== undefined) assert.equal(response.statusCode, status, response.body);
  assert.ok(response.statusCode >= 400 && response.statusCode < 500, `${response.statusCode}: ${response.body}`);
  const { message } = JSON.parse(response.body) as { message: string };
  assert.doesNotMatch(message, UNPRINTABLE, JSON.stringify(message));
  assert.ok(message.length <= 400, `a message of ${message.length} characters: ${message.slice(0, 100)}…`);
  return message;
}

test('oneLine writes every control character, separator and lone surrogate as its code point', () => {
  assert.equal(oneLine('a\nb\r\u001b[31m\u007f\u0085\u009f\u2028'), 'aU+000AbU+000DU+001B[31mU+007FU+0085U+009FU+2028');
  assert.equal(oneLine('\u0000\t'), 'U+0000U+0009');
  assert.equal(oneLine('x\ud800y\udfff'), 'xU+D800yU+DFFF');
  // Pairs, and everything else printable, are kept as they are.
  assert.equal(oneLine('🐕 é ü ☃ "q"'), '🐕 é ü ☃ "q"');
});

test('every ApiError message is one line, whoever wrote it', () => {
  const error = new ApiError('invalid_request', "Field 'a\nb\u001b' is not allowed.");
  assert.equal(error.message, "Field 'aU+000AbU+001B' is not allowed.");
  assert.equal(error.toBody().message, "Field 'aU+000AbU+001B' is not allowed.");
  assert.equal(toApiError(new ApiError('not_found', '\ud83d')).message, 'U+D83D');
});

test('echo keeps 64 characters and says it cut with an ellipsis, never splitting a pair', () => {
  assert.equal(echo('short'), 'short');
  assert.equal(echo('x'.repeat(ECHO_LIMIT)), 'x'.repeat(ECHO_LIMIT));
  assert.equal(echo('x'.repeat(2000)), `${'x'.repeat(ECHO_LIMIT)}…`);
  const paired = `${'x'.repeat(ECHO_LIMIT - 1)}🐕🐕`;
  assert.equal(echo(paired), `${'x'.repeat(ECHO_LIMIT - 1)}…`);
  assert.equal(oneLine(echo(paired)), echo(paired));
  // Control characters count as the code points they are written as, and are never cut in half.
  assert.equal(echo('\n'.repeat(100)), `${'U+000A'.repeat(10)}…`);
  assert.equal(echo(`${'x'.repeat(60)}\u001b`), `${'x'.repeat(60)}…`);
});

test('malformed bodies with raw control characters get a 400 whose message names them by code point', async (t) => {
  const app = await startApp(t);
  const post = (payload: string | Buffer, headers: Record<string, string> = {}) =>
    app.call({ method: 'POST', url: '/v1/pets', headers: { 'content-type': 'application/json', ...headers }, payload });
  const cases: [string | Buffer, string | undefined][] = [
    ['{"name":"\n"}', 'U+000A'],
    ['{"name":"\r"}', 'U+000D'],
    ['{"name":"\u001b[2J"}', 'U+001B'],
    ['{"name":"\u0000"}', 'U+0000'],
    ['{"name":"Rex","categoryId":1.\r2}', 'U+000D'],
    ['{"name":"Rex","categoryId":1e\n}', 'U+000A'],
    ['{"name":"Rex","categoryId":1\r2}', undefined],
    ['{"name":"Rex","categoryId":-\u001b}', 'U+001B'],
    ['{"name":"Rex","categoryId":1.\u0085}', 'U+0085'],
    ['{"name":"Rex","categoryId":7}\u007f', 'U+007F'],
    ['{"name":"Rex","categoryId":7}\u2028', 'U+2028'],
    ['{"na\u001bme":"Rex"}', 'U+001B'],
    [`{"name":"Rex","categoryId":${'1'.repeat(3000)}.}`, '…'],
    ['{"name":"a\\q"}', undefined],
    // Escaped in the JSON, so valid JSON: the field names still come back without the characters.
    ['{"name":"Rex","categoryId":7,"\\u001b[31mred\\n":1}', 'U+001B[31mredU+000A'],
    ['{"name":"Rex","categoryId":7,"\\ud800":1}', 'U+D800'],
    ['{"name":"Rex","categoryId":7,"\\u0085\\u2029":1,"\\u0085\\u2029":1}', 'U+0085U+2029'],
    [`{"name":"Rex","categoryId":7,"${'f'.repeat(2000)}":1}`, `'${'f'.repeat(ECHO_LIMIT)}…'`],
    [`{"${'d\\n'.repeat(1000)}":1,"${'d\\n'.repeat(1000)}":2}`, '…'],
    [Buffer.from([0x7b, 0x22, 0x6e, 0x22, 0x3a, 0x22, 0xed, 0xa0, 0x80, 0x22, 0x7d]), undefined],
  ];
  for (const [body, mention] of cases) {
    const message = assertOneLine(await post(body), 400);
    if (mention) assert.ok(message.includes(mention), `${JSON.stringify(message)} does not name ${mention}`);
  }
});

test('bad query values, header values and paths with control characters get one-line messages', async (t) => {
  const app = await startApp(t);
  const get = (url: string, headers: Record<string, string> = {}) =>
    app.call({ method: 'GET', url, headers } satisfies InjectOptions);
  for (const url of [
    '/v1/pets?limit=%0A',
    '/v1/pets?limit=1%0D%0A',
    '/v1/pets?status=%1B%5B31m',
    '/v1/pets?status=%C2%85',
    '/v1/pets?cursor=%00',
    '/v1/pets?cursor=%ED%A0%80',
    '/v1/pets?%0Aevil=1',
    '/v1/pets?%E2%80%A8=1',
    `/v1/pets?${'%1B'.repeat(2000)}=1`,
    '/v1/pets?%0A=1&%0A=2',
    `/v1/pets?${'q%0A'.repeat(700)}=1&${'q%0A'.repeat(700)}=2`,
  ]) {
    const message = assertOneLine(await get(url), 400);
    assert.ok(message.length < 250, `${url}: ${message}`);
  }
  for (const url of [
    '/v1/pets/%0A',
    '/v1/pets/1%0D',
    '/v1/%1B',
    `/v1/pets/${'%7F'.repeat(2000)}`,
    '/v1/pets/%ED%A0%80',
  ]) {
    assertOneLine(await get(url), 404);
  }
  const post = (headers: Record<string, string>) =>
    app.call({
      method: 'POST',
      url: '/v1/pets',
      headers: { 'content-type': 'application/json', ...headers },
      payload: '{"name":"Rex","categoryId":7}',
    });
  for (const value of ['a\u0085b', '\u001b[31m', 'x'.repeat(300), '"a\u007f"', '']) {
    assertOneLine(await post({ 'idempotency-key': value }), 400);
  }
  assertOneLine(await post({ 'content-type': 'application/json; charset=\u0085\u001b' }), 415);
  assertOneLine(await post({ 'content-type': 'text/\u0085' }), 415);
  assertOneLine(await post({ 'content-length': '3' }));
  for (const authorization of ['Bearer \u0085', '\u001b[31m', `Bearer psk_${'\u0085'.repeat(100)}`, 'Basic \n']) {
    assertOneLine(await app.app.inject({ method: 'GET', url: '/v1/pets', headers: { authorization } }), 401);
  }
});

test('over a socket, headers with obs-text and requests the parser refuses get one-line messages', async (t) => {
  const app = await startApp(t);
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  const send = async (...parts: (string | number[])[]) => {
    const bytes = Buffer.concat(
      parts.map((part) => (typeof part === 'string' ? Buffer.from(part) : Buffer.from(part))),
    );
    const response = parseResponse((await exchangeBytes(port, bytes)).toString('utf8'));
    return { statusCode: Number(response.statusLine.split(' ')[1]), body: response.body };
  };
  const auth = `Authorization: Bearer ${app.key}\r\n`;
  const json = 'Content-Type: application/json\r\nContent-Length: 2\r\n';
  assertOneLine(
    await send('POST /v1/pets HTTP/1.1\r\nHost: x\r\n', auth, json, 'Idempotency-Key: a', [0x85, 0x9b], '\r\n\r\n{}'),
    400,
  );
  assertOneLine(
    await send('POST /v1/pets HTTP/1.1\r\nHost: x\r\n', auth, json, 'Idempotency-Key: a\x1b\r\n\r\n{}'),
    400,
  );
  assertOneLine(await send('GET /v1/pets?a\x01=1 HTTP/1.1\r\nHost: x\r\n', auth, '\r\n'), 400);
  assertOneLine(await send('GET /v1/', [0x85], ' HTTP/1.1\r\nHost: x\r\n\r\n'), 400);
  assertOneLine(await send('GET /v1/pets?limit=%0A HTTP/1.1\r\nHost: x\r\n', auth, '\r\n'), 400);
  assertOneLine(
    await send('GET /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ', [0x85, 0x9b], '\r\n\r\n'),
    401,
  );
});

test('the log lines of refused requests carry no raw control character', async (t) => {
  const stream = new PassThrough();
  let text = '';
  stream.on('data', (chunk) => (text += chunk));
  const { store } = await tempSqliteStore(t);
  const app = await buildApp({ config: loadConfig({}), store, logStream: stream });
  t.after(() => app.close());
  const { key } = await issueKey(store, 'test');
  for (const url of ['/v1/\u0085\u2028x', '/v1/pets/\u009b31m', '/v1/pets?limit=%0A']) {
    await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${key}` } });
  }
  const lines = text.split('\n').filter((line) => line !== '');
  assert.ok(lines.length >= 3);
  for (const line of lines) assert.doesNotMatch(line, UNPRINTABLE, line);
  const paths = lines.map((line) => (JSON.parse(line) as { path?: string }).path);
  // The path as sent; a query, which may carry anything, is never logged.
  assert.deepEqual(paths.slice(-3), ['/v1/%C2%85%E2%80%A8x', '/v1/pets/%C2%9B31m', '/v1/pets']);
});
