import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import swagger from '@fastify/swagger';
import type { FastifyInstance } from 'fastify';
import { stringify } from 'lossless-json';
import type { Config } from '../config.js';
import { errorCodes, INT64_MAX, INT64_MIN } from '../schemas.js';

const errorTable = Object.entries(errorCodes)
  .map(([code, status]) => `| \`${code}\` | ${status} |`)
  .join('\n');

const describeService = (config: Config) => `Keeps a store's catalogue of animals.

Every operation needs \`Authorization: Bearer <API key>\`; keys are issued with \`petstore keys create\`.
Every error is \`application/json\` with the Error body (\`code\`, \`message\`, \`status\`). The codes:

| code | status |
|---|---|
${errorTable}

Integers marked int64 are exact over the whole int64 range, beyond 2^53 too: read them with a
JSON parser that keeps big integers. \`HEAD\` is answered wherever \`GET\` is; a method that an
operation's path does not serve (\`PUT\`, or \`OPTIONS\` while CORS is off) gets 405
\`method_not_allowed\` with an \`Allow\` header naming those it serves.

Every answer carries \`X-Request-Id\` (the caller's, when it is 1 to 128 visible ASCII characters),
except those refused by the HTTP parser before any route (malformed HTTP, 408, 431). Once a valid
key is counted, answers carry the \`RateLimit-Policy\` and \`RateLimit\` fields of the key's quota
(\`"default"\`), a 403 included; answers given before a valid key was read (401, and the 400, 408,
414 and 431 refused before any key is read) carry those of the client address's refused-key
quota (\`"refused-keys"\`) while that limit is on. A 429 carries them with \`Retry-After\` for the
limit that refused it; a 503 (the database cannot be reached) carries \`Retry-After\` too.

A deployment may answer reads from copies of its database (PostgreSQL read replicas). Then a key
still sees its own creates at once through the instance that made them, getPet finds an animal
as soon as its 201 is sent, and following \`next\` links misses nothing; a list may lack animals
that others created within the last ${config.replicaMaxLagMs} ms, never older ones.`;

// Swagger UI's browser files, as @fastify/swagger-ui ships them (swagger-ui-dist would bring an
// install-time analytics script). The page around them is this service's own: one document
// (/v1/openapi.json), no key kept in the browser, a strict Content-Security-Policy.
const uiFiles = join(dirname(createRequire(import.meta.url).resolve('@fastify/swagger-ui')), 'static');
const assets: Record<string, { file: string; type: string }> = {
  'swagger-ui.css': { file: join(uiFiles, 'swagger-ui.css'), type: 'text/css; charset=utf-8' },
  'swagger-ui-bundle.js': { file: join(uiFiles, 'swagger-ui-bundle.js'), type: 'text/javascript; charset=utf-8' },
  'favicon-32x32.png': { file: join(uiFiles, 'favicon-32x32.png'), type: 'image/png' },
};

// The note on rounding shows where the browser cannot keep big integers exact (init.js below).
const page = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Petstore API</title>
<link rel="stylesheet" href="/docs/static/swagger-ui.css">
<link rel="stylesheet" href="/docs/static/page.css">
<link rel="icon" type="image/png" href="/docs/static/favicon-32x32.png">
</head>
<body>
<p id="int64-note"><strong>This browser shows big integers rounded on this page.</strong> Swagger UI reads
JSON with JavaScript's <code>JSON.parse</code>, and this browser lacks <code>JSON.rawJSON</code>, which
the page uses to keep their digits: integers beyond 2<sup>53</sup> (9007199254740991) show rounded
here, in schemas and in responses alike, so 9223372036854775807 shows as 9223372036854776000. The
service stores and sends every digit of an int64: see them with <code>curl</code> or the typed client.</p>
<div id="swagger-ui"></div>
<script src="/docs/static/swagger-ui-bundle.js"></script>
<script src="/docs/static/init.js"></script>
</body>
</html>
`;

// Swagger UI reads JSON with JSON.parse, which rounds integers past 2^53. Where the browser
// offers the parser's source text and JSON.rawJSON, such integers are kept as their digits,
// which JSON.stringify writes back unchanged, so the page shows and sends them exactly; the
// note on rounding is then taken off the page. persistAuthorization stays off: the key typed
// into Authorize lives in the page, never in the browser's storage.
const init = `(function () {
  var parse = JSON.parse;
  if (typeof JSON.rawJSON === 'function' && parse('1', function (k, v, context) { return context && context.source; }) === '1') {
    JSON.parse = function (text, reviver) {
      return parse(text, function (key, value, context) {
        if (typeof value === 'number' && !Number.isSafeInteger(value) && context && /^-?[0-9]+$/.test(context.source)) {
          value = JSON.rawJSON(context.source);
        }
        return reviver ? reviver.call(this, key, value, context) : value;
      });
    };
    document.getElementById('int64-note').hidden = true;
  }
})();
window.ui = SwaggerUIBundle({
  url: '/v1/openapi.json',
  dom_id: '#swagger-ui',
  deepLinking: true,
  tryItOutEnabled: true,
  persistAuthorization: false,
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis],
  layout: 'BaseLayout',
});
`;

const css = `#int64-note { max-width: 1420px; margin: 16px auto 0; padding: 8px 20px; box-sizing: border-box;
  font: 14px sans-serif; background: #fff8e1; border-left: 4px solid #f0a800; }
`;

/** The Content-Security-Policy of the /docs page: its own files, and calls to the API's servers. */
function docsPolicy(config: Config): string {
  const apiOrigins = [config.publicUrl, config.stagingUrl]
    .filter((url) => url !== undefined)
    .map((url) => new URL(url).origin);
  return [
    "default-src 'none'",
    "script-src 'self'",
    // Swagger UI (React) sets style attributes.
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data:",
    `connect-src 'self' ${[...new Set(apiOrigins)].join(' ')}`,
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'",
  ].join('; ');
}

const isInt64Schema = (value: unknown): value is { format: 'int64'; minimum?: number; maximum?: number } =>
  typeof value === 'object' && value !== null && (value as { format?: unknown }).format === 'int64';

/** An int64 bound held as a double, as the exact integer it stands for (2^63-1 is held as 2^63). */
function exactBound(bound: number): bigint {
  const value = BigInt(bound);
  return value > INT64_MAX ? INT64_MAX : value < INT64_MIN ? INT64_MIN : value;
}

/**
 * The document as JSON, with every int64 schema's bounds exact: JSON.stringify would write
 * 2^63-1 (held as a double) as 9223372036854776000.
 */
function toJson(document: unknown): string {
  return stringify(document, (_key, value) => {
    if (!isInt64Schema(value)) return value;
    const { minimum, maximum } = value;
    return {
      ...value,
      ...(minimum !== undefined && { minimum: exactBound(minimum) }),
      ...(maximum !== undefined && { maximum: exactBound(maximum) }),
    };
  })!;
}

/**
 * The OpenAPI 3.1 document, generated from the route schemas, served once at
 * `/v1/openapi.json`, and the interactive page at `/docs`, whose files are all served locally.
 */
export async function registerDocs(app: FastifyInstance, config: Config): Promise<void> {
  // OWASP API9: each server names its audience (x-internal); both serve the API's clients.
  const servers = [
    { url: config.publicUrl, description: 'production', 'x-internal': false },
    // PETSTORE_STAGING_URL set empty: a deployment without a staging environment lists none.
    ...(config.stagingUrl ? [{ url: config.stagingUrl, description: 'staging', 'x-internal': false }] : []),
  ];
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: 'Petstore',
        version: '1.0.0',
        description: describeService(config),
        license: { name: 'MIT', identifier: 'MIT' },
      },
      servers,
      tags: [
        { name: 'pets', description: "The store's catalogue of animals: list, add and fetch them." },
        {
          name: 'events',
          description: 'What happened in the catalogue, oldest first: a feed to keep other systems in step with it.',
        },
      ],
      components: {
        securitySchemes: {
          apiKey: { type: 'http', scheme: 'bearer', description: 'An API key: psk_ and 43 URL-safe characters.' },
        },
      },
    },
    // Paths are relative to the servers, whose addresses end in /v1.
    transform: ({ schema, url }) => ({ schema, url: url.replace(/^\/v1(?=\/)/, '') }),
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json.$id ?? `def-${i}`) },
  });

  let document: string | undefined;
  app.get('/v1/openapi.json', { schema: { hide: true } }, async (_request, reply) => {
    document ??= toJson(app.swagger());
    return reply.type('application/json; charset=utf-8').send(document);
  });

  const policy = docsPolicy(config);
  app.get('/docs', { schema: { hide: true } }, async (_request, reply) =>
    reply.type('text/html; charset=utf-8').header('content-security-policy', policy).send(page),
  );
  const own: Record<string, { body: string; type: string }> = {
    'init.js': { body: init, type: 'text/javascript; charset=utf-8' },
    'page.css': { body: css, type: 'text/css; charset=utf-8' },
  };
  app.get<{ Params: { file: string } }>('/docs/static/:file', { schema: { hide: true } }, async (request, reply) => {
    const name = request.params.file;
    const mine = Object.hasOwn(own, name) ? own[name] : undefined;
    if (mine) return reply.type(mine.type).send(mine.body);
    const asset = Object.hasOwn(assets, name) ? assets[name] : undefined;
    if (!asset) return reply.callNotFound();
    // Read on each request: the page is visited rarely, and the bundle held for it would count in every process.
    return reply
      .type(asset.type)
      .header('cache-control', 'public, max-age=3600')
      .send(await readFile(asset.file));
  });
}
