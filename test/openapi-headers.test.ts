import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { test, type TestContext } from 'node:test';
import { encodeCursor } from '../src/pets/cursor.js';
import { issueKey } from '../src/keys/issue.js';
import { INT64_MAX, ListPetsQuery } from '../src/schemas.js';
import { startApp, type TestApp } from './helpers.js';
import { exchange, parseResponse } from './raw.js';

interface HeaderSchema {
  maxLength: number;
  pattern?: string;
  enum?: string[];
}
interface OpenApi {
  paths: Record<
    string,
    Record<string, { responses: Record<string, { headers?: Record<string, { schema: HeaderSchema }> }> }>
  >;
}

// Fields of HTTP's own framing (RFC 9110, RFC 9112), not the API's: Content-Type is the
// response's content in the document, the others belong to the connection.
const FRAMING = new Set(['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding']);

interface Answer {
  statusCode: number;
  headers: Record<string, unknown>;
}

async function documentOf(app: TestApp['app']): Promise<OpenApi> {
  return (await app.inject({ url: '/v1/openapi.json' })).json();
}

/**
 * Asserts that every field of `answer` (but framing) is described on its status in the
 * document, and that its value fits the description: maxLength, and pattern or enum.
 */
function assertDescribed(document: OpenApi, path: string, method: string, answer: Answer): void {
  const status = String(answer.statusCode);
  const response = document.paths[path]?.[method]?.responses[status];
  assert.ok(response, `${method.toUpperCase()} ${path} answered ${status}, which the document does not list`);
  const described = new Map(Object.entries(response.headers ?? {}).map(([name, doc]) => [name.toLowerCase(), doc]));
  for (const [name, raw] of Object.entries(answer.headers)) {
    if (FRAMING.has(name)) continue;
    const where = `${name} on ${method.toUpperCase()} ${path} ${status}`;
    const doc = described.get(name);
    assert.ok(doc, `${where} is sent but not described`);
    const value = String(raw);
    assert.ok(value.length <= doc.schema.maxLength, `${where}: ${value} is longer than ${doc.schema.maxLength}`);
    if (doc.schema.pattern) assert.match(value, new RegExp(doc.schema.pattern, 'u'), where);
    if (doc.schema.enum) assert.ok(doc.schema.enum.includes(value), `${where}: ${value} is not in the enum`);
  }
}

async function withScopes(t: TestContext, app: TestApp, scopes: ('pets:read' | 'pets:write')[]) {
  const { key } = await issueKey(app.store, 'narrow', new Date(), { scopes });
  return key;
}

test('every field listPets sends is described on its status, with a value that fits', async (t) => {
  const app = await startApp(t);
  const document = await documentOf(app.app);
  for (const name of ['A', 'B', 'C']) {
    await app.call({ method: 'POST', url: '/v1/pets', payload: { name, categoryId: 1 } });
  }
  const check = (answer: Answer) => assertDescribed(document, '/pets', 'get', answer);
  const page = await app.call({ url: '/v1/pets?limit=1&status=available', headers: { 'x-request-id': 'trace-42' } });
  assert.match(String(page.headers.link), /rel="next"/);
  check(page);
  check(await app.call({ url: '/v1/pets?limit=0' }));
  check(await app.app.inject({ url: '/v1/pets' }));
  check(await app.app.inject({ url: '/v1/pets', headers: { authorization: 'Bearer psk_unknown' } }));
  const writer = await withScopes(t, app, ['pets:write']);
  check(await app.app.inject({ url: '/v1/pets', headers: { authorization: `Bearer ${writer}` } }));
  check(await app.call({ url: `/v1/pets?x=${'a'.repeat(9000)}` }));
});

test('every field createPet sends is described on its status, with a value that fits', async (t) => {
  const app = await startApp(t);
  const document = await documentOf(app.app);
  const check = (answer: Answer) => assertDescribed(document, '/pets', 'post', answer);
  const once = { 'idempotency-key': 'order-7' };
  const created = await app.call({
    method: 'POST',
    url: '/v1/pets',
    headers: once,
    payload: { name: 'Rex', categoryId: 7 },
  });
  assert.equal(created.statusCode, 201);
  check(created);
  const replayed = await app.call({
    method: 'POST',
    url: '/v1/pets',
    headers: once,
    payload: { name: 'Rex', categoryId: 7 },
  });
  assert.equal(replayed.headers['idempotent-replayed'], 'true');
  check(replayed);
  check(await app.call({ method: 'POST', url: '/v1/pets', headers: once, payload: { name: 'Max', categoryId: 7 } }));
  check(await app.call({ method: 'POST', url: '/v1/pets', payload: { name: '', categoryId: 7 } }));
  check(await app.call({ method: 'POST', url: '/v1/pets', headers: { 'content-type': 'text/plain' }, payload: 'Rex' }));
  check(await app.call({ method: 'POST', url: '/v1/pets', payload: { name: 'x'.repeat(20_000), categoryId: 7 } }));
  const reader = await withScopes(t, app, ['pets:read']);
  check(
    await app.app.inject({
      method: 'POST',
      url: '/v1/pets',
      headers: { authorization: `Bearer ${reader}` },
      payload: { name: 'Rex', categoryId: 7 },
    }),
  );
});

test('every field getPet sends is described on its status, before and after the sunset', async (t) => {
  const app = await startApp(t);
  const document = await documentOf(app.app);
  const check = (answer: Answer) => assertDescribed(document, '/pets/{petId}', 'get', answer);
  const { id } = (await app.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex', categoryId: 7 } })).json();
  check(await app.call({ url: `/v1/pets/${id}` }));
  check(await app.call({ url: '/v1/pets/9223372036854775807' }));
  check(await app.call({ url: '/v1/pets/abc' }));
  check(await app.app.inject({ url: `/v1/pets/${id}` }));
  app.clock.set(Date.UTC(2030, 11, 5));
  check(await app.call({ url: `/v1/pets/${id}` }));
});

test('the 429s of both limits carry described fields: the key quota and the refused keys of an address', async (t) => {
  const app = await startApp(t, { env: { PETSTORE_RATE_LIMIT: '1', PETSTORE_AUTH_FAILURE_LIMIT: '1' } });
  const document = await documentOf(app.app);
  const check = (answer: Answer) => assertDescribed(document, '/pets', 'get', answer);
  check(await app.call({ url: '/v1/pets' }));
  const limited = await app.call({ url: '/v1/pets' });
  assert.equal(limited.statusCode, 429);
  check(limited);
  const unknown = { authorization: 'Bearer psk_unknown' };
  check(await app.app.inject({ url: '/v1/pets', headers: unknown }));
  const refused = await app.app.inject({ url: '/v1/pets', headers: unknown });
  assert.equal(refused.statusCode, 429);
  assert.match(String(refused.headers['ratelimit-policy']), /^"refused-keys"/);
  check(refused);
});

test('answers refused before any key is read carry described fields, the refused-keys ones included', async (t) => {
  const app = await startApp(t);
  const document = await documentOf(app.app);
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  const raw = async (request: string): Promise<Answer> => {
    const answer = parseResponse(await exchange(port, request));
    return { statusCode: Number(answer.statusLine.split(' ')[1]), headers: Object.fromEntries(answer.headers) };
  };
  const operations = [
    ['GET', '/v1/pets', '/pets'],
    ['POST', '/v1/pets', '/pets'],
    ['GET', '/v1/pets/1', '/pets/{petId}'],
  ] as const;
  for (const [method, url, path] of operations) {
    const answers = [
      await raw(`${method} ${url}?x=${'a'.repeat(9000)} HTTP/1.1\r\nHost: x\r\n\r\n`),
      await raw(`${method} ${url} HTTP/1.1\r\nHost: x\r\nX-Filler: ${'a'.repeat(17 * 1024)}\r\n\r\n`),
      await raw(`${method} ${url} HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n`),
      await raw(`${method} ${url} HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n`),
      await app.app.inject({ method, url, headers: { authorization: 'Basic dXNlcjpwYXNz' } }),
    ];
    assert.deepEqual(
      answers.map((answer) => answer.statusCode),
      [414, 431, 400, 400, 401],
    );
    for (const answer of answers) {
      assert.match(String(answer.headers['ratelimit-policy']), /^"refused-keys"/);
      assertDescribed(document, path, method.toLowerCase(), answer);
    }
  }
});

test('a page answered from the page cache carries the same described fields', async (t) => {
  const app = await startApp(t);
  const document = await documentOf(app.app);
  for (const name of ['A', 'B']) await app.call({ method: 'POST', url: '/v1/pets', payload: { name, categoryId: 1 } });
  const address = await app.app.listen({ port: 0, host: '127.0.0.1' });
  for (let i = 0; i < 3; i++) {
    const response = await fetch(`${address}/v1/pets?limit=1`, { headers: { authorization: `Bearer ${app.key}` } });
    await response.arrayBuffer();
    assertDescribed(document, '/pets', 'get', {
      statusCode: response.status,
      headers: Object.fromEntries(response.headers),
    });
  }
});

test('a 405, which answers no operation, carries Allow as the document says', async (t) => {
  const app = await startApp(t);
  const { info } = (await app.app.inject({ url: '/v1/openapi.json' })).json();
  assert.match(info.description, /405\s+`method_not_allowed` with an `Allow` header/);
  const refused = await app.call({ method: 'PUT', url: '/v1/pets' });
  assert.equal(refused.statusCode, 405);
  assert.match(String(refused.headers.allow), /^GET, POST/);
});

test('the longest cursor the service can issue fits the cursor parameter and the Link header as described', async (t) => {
  const { cursor } = ListPetsQuery.properties;
  const app = await startApp(t);
  const link = (await documentOf(app.app)).paths['/pets']!.get!.responses['200']!.headers!.Link!.schema;
  for (const status of [undefined, 'available', 'pending', 'sold'] as const) {
    // With read replicas a cursor carries the WAL position its page was read at, up to 2^64 - 1.
    for (const readAt of [undefined, 2n ** 64n - 1n]) {
      const longest = encodeCursor({ afterId: INT64_MAX, status, readAt });
      assert.ok(longest.length <= cursor.maxLength!, `${longest} is longer than ${cursor.maxLength}`);
      assert.match(longest, new RegExp(cursor.pattern!, 'u'));
      const header = `</v1/pets?limit=100${status ? `&status=${status}` : ''}&cursor=${longest}>; rel="next"`;
      assert.ok(header.length <= link.maxLength, `${header} is longer than ${link.maxLength}`);
      assert.match(header, new RegExp(link.pattern!, 'u'));
    }
  }
});
