import assert from 'node:assert/strict';
import { test } from 'node:test';
import { assertError, startApp } from './helpers.js';

test('/docs sends a Content-Security-Policy that forbids framing and allows only its own files and the API', async (t) => {
  const { app } = await startApp(t, {
    env: { PETSTORE_PUBLIC_URL: 'https://api.example.com/v1', PETSTORE_STAGING_URL: 'http://127.0.0.1:8081/v1' },
  });
  const page = await app.inject({ url: '/docs' });
  assert.equal(page.statusCode, 200);
  const policy = String(page.headers['content-security-policy']);
  const directives = new Map(policy.split('; ').map((d) => [d.split(' ')[0], d.split(' ').slice(1).join(' ')]));
  assert.equal(directives.get('frame-ancestors'), "'none'");
  assert.equal(directives.get('default-src'), "'none'");
  assert.equal(directives.get('script-src'), "'self'");
  assert.equal(directives.get('connect-src'), "'self' https://api.example.com http://127.0.0.1:8081");
  assert.doesNotMatch(page.body, /<script>|on[a-z]+=/, 'no inline script, which the policy would block');
});

test('the /docs page keeps no key: persistAuthorization is off', async (t) => {
  const { app } = await startApp(t);
  const init = await app.inject({ url: '/docs/static/init.js' });
  assert.equal(init.statusCode, 200);
  assert.match(init.body, /persistAuthorization: false/);
  assert.match(init.body, /url: '\/v1\/openapi\.json'/);
  assert.doesNotMatch(init.body, /localStorage|sessionStorage/);
});

test('the OpenAPI document is served once, at /v1/openapi.json: /docs has no copy of its own', async (t) => {
  const { app } = await startApp(t);
  for (const url of [
    '/docs/json',
    '/docs/yaml',
    '/docs/static/swagger-initializer.js',
    '/docs/static/../package.json',
  ]) {
    assertError(await app.inject({ url }), 404, 'not_found');
  }
});

test('/docs carries a note for browsers that would show integers past 2^53 rounded', async (t) => {
  const { app } = await startApp(t);
  const page = await app.inject({ url: '/docs' });
  assert.match(page.body, /This browser shows big integers rounded on this page/);
  const init = await app.inject({ url: '/docs/static/init.js' });
  assert.match(init.body, /JSON\.rawJSON\(context\.source\)/);
  assert.match(init.body, /getElementById\('int64-note'\)\.hidden = true/);
  assert.match(page.body, /9223372036854775807 shows as 9223372036854776000/);
});

test('the document gives every field of a pet a real example', async (t) => {
  const { app } = await startApp(t);
  const document = (await app.inject({ url: '/v1/openapi.json' })).json();
  const { NewPet, Pet } = document.components.schemas;
  assert.deepEqual(NewPet.properties.name.examples, ['Rex']);
  assert.deepEqual(NewPet.properties.categoryId.examples, [7]);
  assert.deepEqual(Pet.properties.id.examples, [42]);
});
