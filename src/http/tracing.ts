import type { Span } from '@opentelemetry/api';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { tracingOn } from '../tracing.js';
import { operationOf } from './operation.js';

/**
 * Names a request's server span by its route (`GET /v1/pets/:petId`; the method alone when no
 * route matched) and keeps its path without the query, which may carry anything. Its ids go on
 * every line the request logs, the request's log line among them (docs/operations.md#tracing).
 */
function describeRequest(span: Span, request: FastifyRequest): void {
  const route = request.routeOptions.url;
  span.updateName(route === undefined ? request.method : `${request.method} ${route}`);
  span.setAttribute('url.path', request.url.split('?', 1)[0]!);
  const { traceId, spanId } = span.spanContext();
  request.log = request.log.child({ trace_id: traceId, span_id: spanId });
}

/** Names the route handler's span by its operation (`handler getPet`), not by the plugins around it. */
function describeStage(span: Span, { hookName, request }: { hookName: string; request: FastifyRequest }): void {
  if (hookName === 'handler') span.updateName(`handler ${operationOf(request)}`);
}

/**
 * Each request one server span, through Fastify's own instrumentation (@fastify/otel): it
 * continues the caller's W3C `traceparent`, and the route handler runs in a child span, under
 * which the Store's calls and PostgreSQL's queries are spans of their own. Its attributes are
 * the method, route, path and status: no header, key, query or body. Registered first, so that
 * every other plugin's hooks run inside the request's span. When tracing is off (src/tracing.ts)
 * it adds nothing: no hook, no decoration.
 */
export const tracing = fp(
  async (app: FastifyInstance) => {
    if (!tracingOn()) return;
    const { FastifyOtelInstrumentation } = await import('@fastify/otel');
    const instrumentation = new FastifyOtelInstrumentation({
      // Lifecycle hooks are the service's own plumbing (limits, keys, the log line): a span each
      // would outnumber the work worth seeing.
      instrumentHooks: false,
      requestHook: describeRequest,
      lifecycleHook: describeStage,
      // An error's message and stack may quote what the caller sent (a field or query parameter
      // name): the span's status says that it failed, src/tracing.ts drops the text.
      recordExceptions: false,
    });
    await app.register(instrumentation.plugin());
  },
  { name: 'petstore-tracing' },
);
