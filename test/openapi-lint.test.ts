import assert from 'node:assert/strict';
import { test } from 'node:test';
import { startApp } from './helpers.js';
import { lintOpenApi } from './openapi-lint.js';

// docs/api.md#the-openapi-document-and-its-linters: Spectral (spectral:oas and the OWASP ruleset) and
// Redocly (recommended) find no error in the served document, less the rules .spectral.yaml
// turns off with their reasons. The default configuration: the local http:// address.
test('the served OpenAPI document has no error from Spectral (OAS and OWASP) nor from Redocly', async (t) => {
  const { app } = await startApp(t);
  const served = await app.inject({ url: '/v1/openapi.json' });
  assert.equal(served.statusCode, 200);
  const runs = await lintOpenApi(served.body);
  assert.deepEqual(
    runs.map((run) => run.linter),
    ['spectral', 'redocly'],
  );
  for (const { linter, code, output } of runs) {
    assert.equal(code, 0, `${linter} found errors in the served document:\n${output}`);
  }
});
