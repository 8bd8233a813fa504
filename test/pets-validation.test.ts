import assert from 'node:assert/strict';
import { test } from 'node:test';
import { gzipSync } from 'node:zlib';
import { assertError, postRaw, startApp, type TestApp } from './helpers.js';

/** Posts each body and expects a 400 whose message names `field`, then checks nothing was stored. */
async function assertRejected(app: TestApp, bodies: (string | Buffer)[], field: string) {
  for (const body of bodies) {
    const response = await postRaw(app, body);
    try {
      assertError(response, 400, 'invalid_request', field);
    } catch (error) {
      throw new Error(`body ${JSON.stringify(String(body))}: ${(error as Error).message}`, { cause: error });
    }
  }
  const list = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(list.body, '[]');
}

/** Posts `body`, expects 201, and returns the raw response body. */
async function created(app: TestApp, body: string | Buffer): Promise<string> {
  const response = await postRaw(app, body);
  assert.equal(response.statusCode, 201, `body ${JSON.stringify(String(body))}: ${response.body}`);
  return response.body;
}

const withName = (name: string) => JSON.stringify({ name, categoryId: 1 });

test('returns 400 when the body is malformed JSON', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    [
      '{',
      '{"name":"Rex","categoryId":7',
      '{"name":"Rex","categoryId":7,}',
      "{'name':'Rex','categoryId':7}",
      '{name:"Rex",categoryId:7}',
      '{"name":"Rex","categoryId":07}',
      '{"name":"Rex","categoryId":+7}',
      '{"name":"Rex","categoryId":.5}',
      '{"name":"Rex","categoryId":NaN}',
      '{"name":"Rex","categoryId":7} {}',
      '{"name":"Rex","categoryId":7}x',
      '{"name":"Re\nx","categoryId":7}',
      '{"name":"Rex\\x41","categoryId":7}',
      '\ufeff{"name":"Rex","categoryId":7}',
    ],
    'JSON',
  );
});

test('returns 400 when the body is not valid UTF-8', async (t) => {
  const app = await startApp(t);
  const wrap = (bytes: number[]) =>
    Buffer.concat([Buffer.from('{"name":"R'), Buffer.from(bytes), Buffer.from('x","categoryId":7}')]);
  await assertRejected(
    app,
    [
      wrap([0xff]),
      wrap([0xc3]), // a lead byte with no continuation
      wrap([0xc0, 0xaf]), // an overlong encoding of '/'
      wrap([0xed, 0xa0, 0x80]), // a surrogate encoded as UTF-8
      wrap([0xf4, 0x90, 0x80, 0x80]), // beyond U+10FFFF
      Buffer.from([0xe9]), // latin1 'é' alone
    ],
    'UTF-8',
  );
});

test('returns 400 naming the field when an object has the same key twice', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    [
      '{"name":"Rex","name":"Rex","categoryId":7}',
      '{"name":"Rex","categoryId":7,"name":"Max"}',
      '{"name":"Rex","na\\u006de":"Rex","categoryId":7}',
    ],
    'name',
  );
  await assertRejected(app, ['{"categoryId":7,"name":"Rex","categoryId":7.0}'], 'categoryId');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"categoryId":8}'], 'categoryId');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"status":"sold","status":"pending"}'], 'status');
});

test('returns 400 when the body is empty', async (t) => {
  const app = await startApp(t);
  assertError(await postRaw(app, ''), 400, 'invalid_request');
  assertError(await postRaw(app, '', { 'content-type': 'application/json; charset=utf-8' }), 400, 'invalid_request');
  assertError(await postRaw(app, '   '), 400, 'invalid_request');
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
});

test('returns 400 when the body is JSON but not an object', async (t) => {
  const app = await startApp(t);
  await assertRejected(app, ['[]', '[{"name":"Rex","categoryId":7}]', '"Rex"', '7', 'null', 'true', 'false'], 'object');
});

test('returns 400 naming the field when a required field is missing', async (t) => {
  const app = await startApp(t);
  await assertRejected(app, ['{"categoryId":7}', '{"categoryId":7,"status":"sold"}'], 'name');
  await assertRejected(app, ['{"name":"Rex"}', '{"name":"Rex","status":"sold"}'], 'categoryId');
  await assertRejected(app, ['{}'], 'name');
});

test('returns 400 naming the field when an unknown field is sent', async (t) => {
  const app = await startApp(t);
  await assertRejected(app, ['{"id":5,"name":"Rex","categoryId":7}'], 'id');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"color":"red"}'], 'color');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"Name":"Rex"}'], 'Name');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"category_id":7}'], 'category_id');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"__proto__":{"status":"sold"}}'], '__proto__');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"constructor":{}}'], 'constructor');
  await assertRejected(app, ['{"name":"Rex","categoryId":7,"":1}'], "''");
});

test('returns 400 naming name when it is not a string', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    ['{"name":7,"categoryId":7}', '{"name":null,"categoryId":7}', '{"name":["Rex"],"categoryId":7}'],
    'name',
  );
});

test('returns 400 when name is empty or longer than 255 code points', async (t) => {
  const app = await startApp(t);
  await assertRejected(app, [withName(''), withName('a'.repeat(256)), withName('😀'.repeat(256))], 'name');
  await assertRejected(app, [withName('é'.repeat(256)), withName('a'.repeat(10000))], 'name');
});

test('accepts a name of 1 and of 255 code points, astral ones included', async (t) => {
  const app = await startApp(t);
  const cases = ['a', 'a'.repeat(255), '😀'.repeat(255), '𝄞'.repeat(254) + 'a', 'é'.repeat(255)];
  for (const [i, name] of cases.entries()) {
    assert.equal(
      await created(app, withName(name)),
      JSON.stringify({ id: i + 1, name, categoryId: 1, status: 'available' }),
    );
  }
});

test('returns 400 when name is only white space, Unicode White_Space included', async (t) => {
  const app = await startApp(t);
  const spaces = [' ', '   ', '\u00a0', '\u1680', '\u2000', '\u2003', '\u2028', '\u2029', '\u202f', '\u205f', '\u3000'];
  await assertRejected(app, [...spaces.map(withName), withName(spaces.join(''))], 'name');
});

test('returns 400 when name holds a control character', async (t) => {
  const app = await startApp(t);
  const controls = ['\u0000', '\t', '\n', '\r', '\u001b', '\u001f', '\u007f', '\u0080', '\u0085', '\u009f'];
  await assertRejected(
    app,
    controls.flatMap((c) => [withName(c), withName(`Rex${c}`), withName(`${c}Rex`), withName(`R${c}x`)]),
    'name',
  );
});

test('returns 400 when name holds a lone surrogate sent as an escape', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    [
      '{"name":"\\ud800","categoryId":1}',
      '{"name":"Rex\\ud800","categoryId":1}',
      '{"name":"\\udc00Rex","categoryId":1}',
      '{"name":"\\ude00\\ud83d","categoryId":1}',
      '{"name":"\\ud83d\\ud83d","categoryId":1}',
    ],
    'name',
  );
});

test('keeps name exactly as sent: no trimming, no normalisation', async (t) => {
  const app = await startApp(t);
  const names = [
    ' Rex ',
    '\u3000Rex\u2028',
    'Rex  the   dog',
    'e\u0301', // NFD, not composed to é
    '\u00e9', // NFC, not decomposed
    'ﬁdo', // a ligature NFKC would change
    'Å', // U+212B ANGSTROM SIGN, which NFC changes to U+00C5
    '\u200bRex\u200d', // format characters, not white space
    'Rex 🐕‍🦺',
  ];
  for (const [i, name] of names.entries()) {
    const body = await created(app, withName(name));
    assert.equal(JSON.parse(body).name, name, `name ${JSON.stringify(name)}`);
    const got = await app.call({ method: 'GET', url: `/v1/pets/${i + 1}` });
    assert.equal(JSON.parse(got.body).name, name);
  }
});

test('returns categoryId digit for digit over the whole int64 range', async (t) => {
  const app = await startApp(t);
  const values = [
    '-9223372036854775808',
    '9223372036854775807',
    '9007199254740993', // 2^53 + 1, which a double rounds
    '-9007199254740993',
    '1234567890123456789',
    '0',
    '-1',
  ];
  for (const [i, value] of values.entries()) {
    const body = await created(app, `{"name":"Rex","categoryId":${value}}`);
    assert.equal(body, `{"id":${i + 1},"name":"Rex","categoryId":${value},"status":"available"}`);
    const got = await app.call({ method: 'GET', url: `/v1/pets/${i + 1}` });
    assert.equal(got.body, body);
  }
  const listed = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.deepEqual(
    [...listed.body.matchAll(/"categoryId":(-?[0-9]+)/g)].map((m) => m[1]),
    values,
  );
});

test('returns 400 naming categoryId when it is outside int64', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    [
      '9223372036854775808',
      '-9223372036854775809',
      '18446744073709551616',
      '99999999999999999999999999999',
      '1e19',
      '1e400',
      '-1e400',
      '9.223372036854775808e18',
    ].map((n) => `{"name":"Rex","categoryId":${n}}`),
    'categoryId',
  );
});

test('returns 400 naming categoryId when it is not an integer', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    [
      '1.5',
      '-0.5',
      '7.000001',
      '1e-1',
      '1.25e1',
      '123456789012345678.5',
      '"7"',
      '"7.0"',
      'null',
      'true',
      'false',
      '[7]',
      '{}',
    ].map((n) => `{"name":"Rex","categoryId":${n}}`),
    'categoryId',
  );
});

test('accepts numbers with no fractional part as integers: 7.0, 7e2, 1.5e1, 70e-1', async (t) => {
  const app = await startApp(t);
  const cases: [string, string][] = [
    ['7.0', '7'],
    ['7e2', '700'],
    ['7E2', '700'],
    ['7e+2', '700'],
    ['1.5e1', '15'],
    ['70e-1', '7'],
    ['-7.000', '-7'],
    ['0.0', '0'],
    ['9.223372036854775807e18', '9223372036854775807'],
    ['-9.223372036854775808E18', '-9223372036854775808'],
  ];
  for (const [i, [sent, stored]] of cases.entries()) {
    const body = await created(app, `{"name":"Rex","categoryId":${sent}}`);
    assert.equal(body, `{"id":${i + 1},"name":"Rex","categoryId":${stored},"status":"available"}`, `sent ${sent}`);
  }
});

test('returns 400 naming status when it is not a PetStatus', async (t) => {
  const app = await startApp(t);
  await assertRejected(
    app,
    ['"lost"', '"AVAILABLE"', '"Available"', '" available"', '""', 'null', '7', '["sold"]'].map(
      (s) => `{"name":"Rex","categoryId":7,"status":${s}}`,
    ),
    'status',
  );
});

test('returns 415 when the Content-Type is not application/json', async (t) => {
  const app = await startApp(t);
  const body = '{"name":"Rex","categoryId":7}';
  for (const type of [
    'text/plain',
    'text/json',
    'application/x-www-form-urlencoded',
    'multipart/form-data; boundary=x',
    'application/jsonx',
    'application/vnd.api+json',
    'application/json-patch+json',
    'application/xml',
  ]) {
    const response = await postRaw(app, body, { 'content-type': type });
    assertError(response, 415, 'unsupported_media_type', 'Content-Type');
  }
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
});

test('returns 415 when no Content-Type is sent, with or without a body', async (t) => {
  const app = await startApp(t);
  for (const payload of ['{"name":"Rex","categoryId":7}', undefined]) {
    const response = await app.call({ method: 'POST', url: '/v1/pets', ...(payload !== undefined && { payload }) });
    assertError(response, 415, 'unsupported_media_type', 'Content-Type');
  }
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
});

test('returns 415 naming Content-Encoding, with Accept-Encoding: identity, for a body sent with a content coding, and stores nothing', async (t) => {
  const app = await startApp(t);
  const json = '{"name":"Rex","categoryId":7}';
  const cases: [string, string | Buffer][] = [
    // A plain JSON body that says it is compressed, and one that is.
    ['gzip', json],
    ['gzip', gzipSync(json)],
    ['br', json],
    ['deflate, identity', json],
    ['x-unknown', json],
    ['', json],
  ];
  for (const [coding, body] of cases) {
    const response = await postRaw(app, body, { 'content-type': 'application/json', 'content-encoding': coding });
    assertError(response, 415, 'unsupported_media_type', 'Content-Encoding');
    assert.equal(response.headers['accept-encoding'], 'identity', coding);
  }
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
  for (const identity of ['identity', 'Identity']) {
    const response = await postRaw(app, json, { 'content-type': 'application/json', 'content-encoding': identity });
    assert.equal(response.statusCode, 201, response.body);
  }
});

test('accepts Content-Type application/json with a charset=utf-8 parameter, in any case', async (t) => {
  const app = await startApp(t);
  const types = [
    'application/json; charset=utf-8',
    'application/json;charset=UTF-8',
    'Application/JSON; charset="utf-8"',
    'APPLICATION/JSON',
  ];
  for (const [i, type] of types.entries()) {
    const response = await postRaw(app, '{"name":"Rex","categoryId":7}', { 'content-type': type });
    assert.equal(response.statusCode, 201, `${type}: ${response.body}`);
    assert.equal(response.headers.location, `/v1/pets/${i + 1}`);
  }
});

test('returns 415 when the charset is not UTF-8', async (t) => {
  const app = await startApp(t);
  for (const charset of ['latin1', 'iso-8859-1', 'utf-16', 'us-ascii', 'utf8x']) {
    const response = await postRaw(app, '{"name":"Rex","categoryId":7}', {
      'content-type': `application/json; charset=${charset}`,
    });
    assertError(response, 415, 'unsupported_media_type');
  }
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
});

test('returns 413 for a body over 16 KiB and accepts one of exactly 16 KiB', async (t) => {
  const app = await startApp(t);
  const base = '{"name":"Rex","categoryId":7}';
  const exact = base + ' '.repeat(16 * 1024 - base.length);
  assert.equal(Buffer.byteLength(exact), 16384);
  assertError(await postRaw(app, exact + ' '), 413, 'payload_too_large');
  assertError(await postRaw(app, withName('a'.repeat(100_000))), 413, 'payload_too_large');
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).body, '[]');
  assert.equal(await created(app, exact), '{"id":1,"name":"Rex","categoryId":7,"status":"available"}');
});

test('returns 413 before parsing: an oversized malformed body is still a 413', async (t) => {
  const app = await startApp(t);
  assertError(await postRaw(app, '{'.repeat(20_000)), 413, 'payload_too_large');
  assertError(await postRaw(app, Buffer.alloc(20_000, 0xff)), 413, 'payload_too_large');
});

test('returns 400 when the body nests deeper than 32 levels, however deep', async (t) => {
  const app = await startApp(t);
  const nested = (levels: number) => '['.repeat(levels) + ']'.repeat(levels);
  // 32 levels is parsed, and refused only for the unknown field it sits in.
  assertError(await postRaw(app, `{"name":"a","categoryId":1,"x":${nested(31)}}`), 400, 'invalid_request', "'x'");
  await assertRejected(app, [`{"name":"a","categoryId":1,"x":${nested(32)}}`, nested(8000)], 'nests deeper than 32');
});

test('returns 400 naming the byte order mark when the body starts with one', async (t) => {
  const app = await startApp(t);
  const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(withName('Rex'))]);
  await assertRejected(app, [body], 'byte order mark');
});
