import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { causeOf, unavailable } from '../errors.js';
import type { Replication, ReplicationChange, Store } from '../store/store.js';

/**
 * One line per change of the read replicas (docs/operations.md#read-replicas): a replica left out
 * and why, one taken back, the primary not answering and answering again.
 */
function logChange(log: FastifyBaseLogger, change: ReplicationChange): void {
  if (change.kind === 'primary') {
    if (change.answering) log.info('primary database answering again');
    else log.warn('primary database not answering: reads go to the replicas in use, writes get 503');
    return;
  }
  const { name: replica, state, lagMs } = change.replica;
  if (state === 'in_use') log.info({ replica, lagMs, was: change.was }, 'read replica in use');
  else log.warn({ replica, reason: state, lagMs }, `read replica left out: ${state}`);
}

/** What /readyz adds with read replicas: whether the primary answers, and each replica's state and lag. */
function replicationOf(replication: Replication) {
  return {
    primary: replication.primaryAnswering() ? ('answering' as const) : ('not_answering' as const),
    replicas: replication.replicas().map(({ name, state, lagMs }) => ({ name, state, lagMs })),
  };
}

/**
 * `/healthz`: the process answers. `/readyz`: and its database does too (with read replicas:
 * the primary, or a replica in use, so reads are answered). Both public.
 */
export function registerHealth(app: FastifyInstance, store: Store): void {
  let down = false;
  const { replication } = store;
  replication?.onChange((change) => logChange(app.log, change));
  const status = {
    type: 'object',
    properties: {
      status: { type: 'string' },
      primary: { type: 'string', enum: ['answering', 'not_answering'] },
      replicas: {
        type: 'array',
        items: {
          type: 'object',
          properties: {
            name: { type: 'string' },
            state: { type: 'string' },
            lagMs: { type: ['integer', 'null'] },
          },
          required: ['name', 'state', 'lagMs'],
          additionalProperties: false,
        },
      },
    },
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
      return replication ? { status: 'ready', ...replicationOf(replication) } : { status: 'ready' };
    },
  );
}
