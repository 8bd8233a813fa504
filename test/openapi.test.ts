import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Validator } from '@seriousme/openapi-schema-validator';
import { errorCodes } from '../src/schemas.js';
import { startApp } from './helpers.js';

async function fetchDocument(t: Parameters<typeof startApp>[0], env?: Record<string, string>) {
  const { app } = await startApp(t, { env });
  const response = await app.inject({ url: '/v1/openapi.json' });
  assert.equal(response.statusCode, 200);
  assert.match(String(response.headers['content-type']), /^application\/json/);
  return JSON.parse(response.body);
}

test('serves a valid OpenAPI 3.1 document without a key', async (t) => {
  const document = await fetchDocument(t);
  assert.equal(document.openapi, '3.1.0');
  assert.equal(document.info.version, '1.0.0');
  const result = await new Validator().validate(document);
  assert.equal(result.valid, true, JSON.stringify(result.errors, null, 2));
});

test('lists the three operations by their contract names, getPet deprecated', async (t) => {
  const { paths } = await fetchDocument(t);
  assert.equal(paths['/pets'].get.operationId, 'listPets');
  assert.equal(paths['/pets'].post.operationId, 'createPet');
  assert.equal(paths['/pets/{petId}'].get.operationId, 'getPet');
  assert.equal(paths['/pets/{petId}'].get.deprecated, true);
  assert.equal(paths['/pets'].get.deprecated, undefined);
  assert.deepEqual(paths['/pets'].get.security, [{ apiKey: ['pets:read'] }]);
  assert.deepEqual(paths['/pets'].post.security, [{ apiKey: ['pets:write'] }]);
  assert.deepEqual(paths['/pets/{petId}'].get.security, [{ apiKey: ['pets:read'] }]);
  assert.deepEqual(paths['/events'].get.security, [{ apiKey: ['events:read'] }]);
});

test('documents each status the operations answer with the Error body', async (t) => {
  const { paths } = await fetchDocument(t);
  const statuses = (operation: { responses: object }) => Object.keys(operation.responses).sort();
  const common = ['401', '403', '408', '414', '429', '431', '500', '503'];
  assert.deepEqual(statuses(paths['/pets'].get), ['200', '400', ...common].sort());
  assert.deepEqual(statuses(paths['/pets'].post), ['201', '400', '409', '413', '415', '422', ...common].sort());
  assert.deepEqual(statuses(paths['/pets/{petId}'].get), ['200', '400', '404', '410', ...common].sort());
  assert.deepEqual(statuses(paths['/events'].get), ['200', '400', ...common].sort());
  const errorRef = paths['/pets'].post.responses['415'].content['application/json'].schema.$ref;
  assert.equal(errorRef, '#/components/schemas/Error');
  for (const [operation, scope] of [
    [paths['/pets'].get, 'pets:read'],
    [paths['/pets'].post, 'pets:write'],
    [paths['/pets/{petId}'].get, 'pets:read'],
    [paths['/events'].get, 'events:read'],
  ]) {
    const forbidden = operation.responses['403'];
    assert.equal(forbidden.content['application/json'].schema.$ref, '#/components/schemas/Error');
    assert.ok(forbidden.description.includes(scope), forbidden.description);
    assert.ok(forbidden.headers['WWW-Authenticate'].description.includes(`scope="${scope}"`));
  }
});

test('keeps /metrics out of the document', async (t) => {
  const { paths } = await fetchDocument(t);
  assert.deepEqual(Object.keys(paths).sort(), ['/events', '/pets', '/pets/{petId}']);
});

test('lists every error code of the contract', async (t) => {
  const { components } = await fetchDocument(t);
  assert.deepEqual(components.schemas.Error.properties.code.enum, Object.keys(errorCodes));
  assert.deepEqual(components.schemas.Error.required, ['code', 'message', 'status']);
  assert.equal(components.schemas.Error.additionalProperties, false);
});

test('describes the schemas of the contract, int64 exact and no unknown fields', async (t) => {
  const { components } = await fetchDocument(t);
  const { Pet, NewPet, PetStatus } = components.schemas;
  assert.deepEqual(PetStatus.enum, ['available', 'pending', 'sold']);
  assert.deepEqual(NewPet.required, ['name', 'categoryId']);
  assert.deepEqual(Pet.required, ['id', 'name', 'categoryId', 'status']);
  assert.equal(NewPet.additionalProperties, false);
  assert.deepEqual(
    [Pet.properties.id.format, Pet.properties.categoryId.format, NewPet.properties.categoryId.format],
    ['int64', 'int64', 'int64'],
  );
});

test('lists production and staging base addresses from configuration', async (t) => {
  const document = await fetchDocument(t, {
    PETSTORE_PUBLIC_URL: 'https://api.example.com/v1',
    PETSTORE_STAGING_URL: 'https://staging.example.com/v1/',
  });
  assert.deepEqual(document.servers, [
    { url: 'https://api.example.com/v1', description: 'production', 'x-internal': false },
    { url: 'https://staging.example.com/v1', description: 'staging', 'x-internal': false },
  ]);
});

test('the production address follows HOST and PORT when it is not set', async (t) => {
  const document = await fetchDocument(t, { PORT: '9090' });
  assert.equal(document.servers[0].url, 'http://127.0.0.1:9090/v1');
});

test('documents the deprecation headers and limit rules', async (t) => {
  const { paths } = await fetchDocument(t);
  assert.deepEqual(Object.keys(paths['/pets/{petId}'].get.responses['200'].headers), [
    'X-Request-Id',
    'Cache-Control',
    'X-Content-Type-Options',
    'Deprecation',
    'Sunset',
    'Link',
    'RateLimit-Policy',
    'RateLimit',
  ]);
  const limit = paths['/pets'].get.parameters.find((p: { name: string }) => p.name === 'limit');
  assert.deepEqual([limit.schema.minimum, limit.schema.maximum, limit.schema.default], [1, 100, 20]);
  assert.equal(paths['/pets'].get.responses['200'].content['application/json'].schema.maxItems, 100);
});

test('writes the int64 bounds digit for digit: -2^63 and 2^63-1, ids from 1', async (t) => {
  const { app } = await startApp(t);
  const { body } = await app.inject({ url: '/v1/openapi.json' });
  const int64 = '"type":"integer","format":"int64","minimum":-9223372036854775808,"maximum":9223372036854775807';
  // categoryId in NewPet and in Pet.
  assert.equal(body.split(int64).length - 1, 2, body);
  const positive = '"type":"integer","format":"int64","minimum":1,"maximum":9223372036854775807';
  // Pet's id and getPet's petId.
  assert.equal(body.split(positive).length - 1, 2, body);
  assert.doesNotMatch(body, /9223372036854776000/);
});

test('describes the licence, the tag of every operation, and a length for every string', async (t) => {
  const document = await fetchDocument(t);
  assert.deepEqual(document.info.license, { name: 'MIT', identifier: 'MIT' });
  assert.deepEqual(
    document.tags.map((tag: { name: string }) => tag.name),
    ['pets', 'events'],
  );
  for (const operation of [
    document.paths['/pets'].get,
    document.paths['/pets'].post,
    document.paths['/pets/{petId}'].get,
  ]) {
    assert.deepEqual(operation.tags, ['pets']);
  }
  assert.deepEqual(document.paths['/events'].get.tags, ['events']);
  // Every string schema, wherever it is, is bounded: by maxLength or by its enum.
  const unbounded: string[] = [];
  const visit = (node: unknown, path: string) => {
    if (Array.isArray(node)) return node.forEach((item, i) => visit(item, `${path}/${i}`));
    if (node === null || typeof node !== 'object') return;
    const schema = node as Record<string, unknown>;
    if (schema.type === 'string' && schema.maxLength === undefined && schema.enum === undefined) unbounded.push(path);
    for (const [key, value] of Object.entries(schema)) visit(value, `${path}/${key}`);
  };
  visit(document.paths, '#/paths');
  visit(document.components, '#/components');
  assert.deepEqual(unbounded, []);
});

test('serves the interactive documentation page with its assets locally', async (t) => {
  const { app } = await startApp(t);
  const page = await app.inject({ url: '/docs' });
  assert.equal(page.statusCode, 200);
  assert.match(String(page.headers['content-type']), /^text\/html/);
  const assets = [...page.body.matchAll(/(?:src|href)="([^"]+)"/g)].map((m) => m[1]!);
  assert.ok(assets.length > 0);
  for (const asset of assets) {
    assert.doesNotMatch(asset, /^(https?:)?\/\//, `${asset} would leave the machine`);
    const response = await app.inject({ url: new URL(asset, 'http://local/docs/').pathname });
    assert.equal(response.statusCode, 200, asset);
  }
});
