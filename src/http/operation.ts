import type { FastifyRequest, FastifySchema } from 'fastify';

/**
 * What a route serves, in few enough values to be a metric label: its operationId (`listPets`),
 * else its URL (`/healthz`), else `unmatched` for a path no route serves, so scanners probing
 * random paths cannot grow the label set. Resolved once per route (observability.ts).
 */
export function operationOfRoute(schema: FastifySchema | undefined, url: string | undefined): string {
  const id = (schema as { operationId?: unknown } | undefined)?.operationId;
  if (typeof id === 'string') return id;
  return url ?? 'unmatched';
}

/**
 * operationOfRoute for the route `request` matched. `request.routeOptions` builds a new object
 * on every read: for requests whose route left no series on them (observability.ts).
 */
export function operationOf(request: FastifyRequest): string {
  const { schema, url } = request.routeOptions;
  return operationOfRoute(schema, url);
}
