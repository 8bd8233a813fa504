/**
 * Fastify querystring parser that keeps every parameter, `__proto__` included, on an object
 * with no prototype, so validation can refuse it as unknown; a repeated one becomes an array.
 *
 * @example parseQuery('limit=5&limit=6&__proto__=1') // { limit: ['5', '6'], __proto__: '1' }
 */
export function parseQuery(text: string): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = Object.create(null);
  for (const [key, value] of new URLSearchParams(text)) {
    const seen = query[key];
    query[key] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
  }
  return query;
}
