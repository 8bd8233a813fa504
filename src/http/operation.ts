import type { FastifyRequest } from 'fastify';

/**
 * What a request asked for, in few enough values to be a metric label: the operationId
 * (`listPets`), else the route (`/healthz`), else `unmatched` for a path no route serves, so
 * scanners probing random paths cannot grow the label set.
 */
export function operationOf(request: FastifyRequest): string {
  const { schema, url } = request.routeOptions;
  const id = (schema as { operationId?: unknown } | undefined)?.operationId;
  if (typeof id === 'string') return id;
  return url ?? 'unmatched';
}
