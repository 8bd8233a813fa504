import type { FastifyInstance } from 'fastify';
import { causeOf, unavailable } from '../errors.js';
import type { Store } from '../store/store.js';

/** `/healthz`: the process answers. `/readyz`: and its database does too. Both public. */
export function registerHealth(app: FastifyInstance, store: Store): void {
  let down = false;
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
    async (request, reply) => {
      try {
        await store.ping();
      } catch (error) {
        // A load balancer asks every few seconds: one line when the database goes away, with
        // its cause once and no stack (the cause is the database's, not a fault in this code).
        if (!down) request.log.warn({ cause: causeOf(error) }, 'database not reachable');
        down = true;
        // Sent here, not thrown: the error handler would log it again, stack and all.
        return reply.code(503).send(unavailable().toBody());
      }
      if (down) request.log.info('database reachable again');
      down = false;
      return { status: 'ready' };
    },
  );
}
