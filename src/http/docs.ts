import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance } from 'fastify';
import type { Config } from '../config.js';
import { errorCodes } from '../schemas.js';

const errorTable = Object.entries(errorCodes)
  .map(([code, status]) => `| \`${code}\` | ${status} |`)
  .join('\n');

const description = `Keeps a store's catalogue of animals.

Every operation needs \`Authorization: Bearer <API key>\`; keys are issued with \`petstore keys create\`.
Every error is \`application/json\` with the Error body (\`code\`, \`message\`, \`status\`). The codes:

| code | status |
|---|---|
${errorTable}

Integers marked int64 are exact over the whole int64 range, beyond 2^53 too: read them with a
JSON parser that keeps big integers. \`HEAD\` is answered wherever \`GET\` is.`;

/**
 * The OpenAPI 3.1 document, generated from the route schemas, served at `/v1/openapi.json`,
 * and the interactive page at `/docs`, whose assets are served locally (no CDN).
 */
export async function registerDocs(app: FastifyInstance, config: Config): Promise<void> {
  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Petstore', version: '1.0.0', description },
      servers: [
        { url: config.publicUrl, description: 'production' },
        { url: config.stagingUrl, description: 'staging' },
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
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    uiConfig: { deepLinking: true, tryItOutEnabled: true, persistAuthorization: true },
  });

  let document: string | undefined;
  app.get('/v1/openapi.json', { schema: { hide: true } }, async (_request, reply) => {
    document ??= JSON.stringify(app.swagger());
    return reply.type('application/json; charset=utf-8').send(document);
  });
}
