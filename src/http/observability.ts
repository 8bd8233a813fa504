import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Metrics } from './metrics.js';
import { operationOf } from './operation.js';
import { echoRequestId, logAborted, logAnswer } from './request-log.js';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Counts and logs a request answered outside the routes' hooks (the router's refusals):
     * every answer is counted and logged once, whoever sent it.
     */
    recordAnswer(request: FastifyRequest, reply: FastifyReply): void;
  }
}

export interface ObservabilityOptions {
  metrics: Metrics;
}

/**
 * What every answer leaves behind, from one place: `X-Request-Id` echoed, the request counted in
 * flight, then once answered petstore_http_requests_total, its duration histogram and the one log
 * line (request-log.ts); a request whose client went away is logged as aborted. Callback hooks:
 * no promise per request.
 */
export const observability = fp<ObservabilityOptions>(
  async (app: FastifyInstance, { metrics }) => {
    const open = new WeakSet<FastifyRequest>();
    const record = (request: FastifyRequest, reply: FastifyReply) => {
      const operation = operationOf(request);
      const seconds = reply.elapsedTime / 1000;
      metrics.observeAnswer(operation, request.method, reply.statusCode, seconds);
      logAnswer(request.log, {
        operation,
        method: request.method,
        url: request.url,
        status: reply.statusCode,
        seconds,
      });
    };
    app.decorate('recordAnswer', (request: FastifyRequest, reply: FastifyReply) => {
      echoRequestId(request, reply);
      reply.raw.once('finish', () => record(request, reply));
    });
    app.addHook('onRequest', (request, reply, done) => {
      open.add(request);
      metrics.inFlight.count += 1;
      echoRequestId(request, reply);
      done();
    });
    app.addHook('onResponse', (request, reply, done) => {
      if (open.delete(request)) metrics.inFlight.count -= 1;
      record(request, reply);
      done();
    });
    app.addHook('onRequestAbort', (request, done) => {
      if (open.delete(request)) metrics.inFlight.count -= 1;
      logAborted(request);
      done();
    });
  },
  { name: 'petstore-observability' },
);
