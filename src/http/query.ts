const NOTHING_TO_DECODE = /^[^%+\uD800-\uDFFF]*$/;

/**
 * Fastify querystring parser that keeps every parameter, `__proto__` included, on an object
 * with no prototype, so validation can refuse it as unknown; a repeated one becomes an array.
 *
 * @example parseQuery('limit=5&limit=6&__proto__=1') // { limit: ['5', '6'], __proto__: '1' }
 */
export function parseQuery(text: string): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = Object.create(null);
  const add = (key: string, value: string) => {
    const seen = query[key];
    query[key] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
  };
  // Without '%', '+' or a lone surrogate (which URLSearchParams turns into U+FFFD) there is
  // nothing to decode: split it here as URLSearchParams would (empty pairs skipped, the value
  // after the first '='), without building its objects.
  if (NOTHING_TO_DECODE.test(text)) {
    for (const pair of text.split('&')) {
      if (pair === '') continue;
      const equals = pair.indexOf('=');
      if (equals < 0) add(pair, '');
      else add(pair.slice(0, equals), pair.slice(equals + 1));
    }
    return query;
  }
  for (const [key, value] of new URLSearchParams(text)) add(key, value);
  return query;
}
