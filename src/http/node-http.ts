import { createRequire } from 'node:module';

/**
 * `node:http`, loaded the way CommonJS code (Fastify) loads it. `import { … } from 'node:http'`
 * builds the module's ES namespace, which reads every export, and three of them (`WebSocket`,
 * `CloseEvent`, `MessageEvent`) load Node's fetch implementation, undici, to answer: about 2 MB
 * of peak memory (bench/README.md), for nothing the service uses. Types still come from
 * `import type`.
 */
export const { createServer, METHODS, ServerResponse, STATUS_CODES } = createRequire(import.meta.url)(
  'node:http',
) as typeof import('node:http');
