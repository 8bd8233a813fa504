import type { FastifyInstance } from 'fastify';
import { unavailable } from '../errors.js';
import type { Store } from '../store/store.js';

/** `/healthz`: the process answers. `/readyz`: and its database does too. Both public. */
export function registerHealth(app: FastifyInstance, store: Store): void {
  const status = {
    type: 'object',
    properties: { status: { type: 'string' } },
    required: ['status'],
    additionalProperties: false,
  };
  app.get('/healthz', { schema: { hide: true, response: { 200: status } } }, async () => ({ status: 'ok' }));
  app.get(
    '/readyz',
    { schema: { hide: true, response: { 200: status, 503: { $ref: 'Error#' } } } },
    async (request) => {
      try {
        await store.ping();
      } catch (error) {
        request.log.warn({ err: error }, 'database not reachable');
        throw unavailable();
      }
      return { status: 'ready' };
    },
  );
}
