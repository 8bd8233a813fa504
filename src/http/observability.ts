import type { FastifyInstance, FastifyReply, FastifyRequest, onRequestHookHandler } from 'fastify';
import fp from 'fastify-plugin';
import type { AnswerSeries, Metrics } from './metrics.js';
import { operationOf, operationOfRoute } from './operation.js';
import { echoRequestId, logAborted, logAnswer } from './request-log.js';

declare module 'fastify' {
  interface FastifyInstance {
    /**
     * Counts and logs a request answered outside the routes' hooks (the router's refusals):
     * every answer is counted and logged once, whoever sent it.
     */
    recordAnswer(request: FastifyRequest, reply: FastifyReply): void;
  }
  interface FastifyRequest {
    /** Where the answer is counted: its route's series, left by the route's first hook. */
    answerSeries?: AnswerSeries;
  }
}

export interface ObservabilityOptions {
  metrics: Metrics;
}

/**
 * What every answer leaves behind, from one place: `X-Request-Id` echoed, the request counted in
 * flight, then once answered petstore_http_requests_total, its duration histogram and the one log
 * line (request-log.ts); a request whose client went away first is logged as aborted. One
 * listener per request, on the response's `'close'`, which Node emits exactly once, after the
 * answer was handed over or once it never will be (the connection closed): the in-flight count
 * cannot leak whichever way a request ends. The operation label and its series are resolved once
 * per route and left on the request by the route's first hook. Callback hooks: no promise.
 */
export const observability = fp<ObservabilityOptions>(
  async (app: FastifyInstance, { metrics }) => {
    const { inFlight } = metrics;
    // Requests refused before their route's hooks run (guardRequests, the not-found handler,
    // the router) find their series here instead.
    const seriesOf = (request: FastifyRequest) => request.answerSeries ?? metrics.answerSeries(operationOf(request));
    const record = (request: FastifyRequest, reply: FastifyReply) => {
      const series = seriesOf(request);
      // Fastify stamps the end of the answer on its 'finish', before 'close'.
      const seconds = reply.elapsedTime / 1000;
      series.observe(request.method, reply.statusCode, seconds);
      logAnswer(request.log, {
        operation: series.operation,
        method: request.method,
        url: request.url,
        status: reply.statusCode,
        seconds,
      });
    };
    const settle = (request: FastifyRequest, reply: FastifyReply, counted: boolean) => {
      const response = reply.raw;
      response.on('close', () => {
        if (counted) inFlight.count -= 1;
        // Handed over whole; or ended before the client went away (an injected response closes
        // before its last write's callback, a real one whose request was not aborted).
        if (response.writableFinished || (response.writableEnded && !request.raw.aborted)) record(request, reply);
        else if (counted) logAborted(request, seriesOf(request).operation);
      });
    };

    app.decorateRequest('answerSeries', undefined);
    const marks = new WeakSet<onRequestHookHandler>();
    app.addHook('onRoute', (route) => {
      const hooks = route.onRequest === undefined ? [] : [route.onRequest].flat();
      // The HEAD route Fastify adds beside a GET copies its hooks, this mark among them.
      if (hooks[0] && marks.has(hooks[0] as onRequestHookHandler)) return;
      const series = metrics.answerSeries(operationOfRoute(route.schema, route.url));
      const mark: onRequestHookHandler = (request, _reply, done) => {
        request.answerSeries = series;
        done();
      };
      marks.add(mark);
      route.onRequest = [mark, ...hooks];
    });
    app.decorate('recordAnswer', (request: FastifyRequest, reply: FastifyReply) => {
      echoRequestId(request, reply);
      settle(request, reply, false);
    });
    app.addHook('onRequest', (request, reply, done) => {
      inFlight.count += 1;
      echoRequestId(request, reply);
      settle(request, reply, true);
      done();
    });
  },
  { name: 'petstore-observability' },
);
