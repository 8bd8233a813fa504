import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { guardRequest } from './limits.js';
import type { Metrics } from './metrics.js';
import { operationOf } from './operation.js';
import { echoRequestId, logAborted, logAnswer, type Answer } from './request-log.js';

/**
 * Records one answered request: petstore_http_requests_total and its duration histogram, and
 * the request's log line. Every answer comes here, whoever sent it: a route (the hooks below),
 * the router's refusals (`frameworkErrors`) and the page cache in front of Fastify.
 * `reqId` is given when `log` is not the request's own logger.
 */
export function recordAnswer(
  metrics: Metrics,
  log: FastifyBaseLogger,
  reqId: string | undefined,
  answer: Answer,
): void {
  metrics.answers.observe(answer.operation, answer.method, answer.status, answer.seconds);
  logAnswer(log, reqId, answer);
}

/** What Fastify answered to `request`, for recordAnswer. */
export function answerOf(request: FastifyRequest, reply: FastifyReply): Answer {
  return {
    operation: operationOf(request),
    method: request.method,
    url: request.url,
    status: reply.statusCode,
    seconds: reply.elapsedTime / 1000,
  };
}

/**
 * The service's global hooks, one of each kind. `onRequest`, first on every request: counted in
 * flight, `X-Request-Id` echoed, then guardRequest's checks. `onResponse`: recordAnswer.
 * `onRequestAbort`: no longer in flight, and logged. Callback hooks: no promise per request.
 */
export function observeAnswers(app: FastifyInstance, metrics: Metrics): void {
  const open = new WeakSet<FastifyRequest>();
  app.addHook('onRequest', (request, reply, done) => {
    open.add(request);
    metrics.inFlight.count += 1;
    echoRequestId(request, reply);
    guardRequest(request, reply, done);
  });
  app.addHook('onResponse', (request, reply, done) => {
    if (open.delete(request)) metrics.inFlight.count -= 1;
    recordAnswer(metrics, request.log, undefined, answerOf(request, reply));
    done();
  });
  // A request whose client went away is no longer in flight, answered or not.
  app.addHook('onRequestAbort', (request, done) => {
    if (open.delete(request)) metrics.inFlight.count -= 1;
    logAborted(request);
    done();
  });
}
