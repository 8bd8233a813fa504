import { METHODS } from 'node:http';
import type { FastifyInstance } from 'fastify';
import { ApiError } from '../errors.js';

/** Makes every method Node's parser knows routable, so a wrong one is a 405 rather than a 404. */
export function routeEveryMethod(app: FastifyInstance): void {
  for (const method of METHODS) {
    if (!app.supportedMethods.includes(method)) app.addHttpMethod(method);
  }
}

/**
 * Answers 405 with `Allow` (RFC 9110 section 15.5.6) for every method `url` does not serve.
 * It answers in `onRequest`, before any body is read, and asks for no key.
 */
export function refuseOtherMethods(app: FastifyInstance, url: string, allowed: string[]): void {
  const allow = allowed.includes('GET') ? [...allowed, 'HEAD'] : allowed;
  const others = app.supportedMethods.filter((method) => !allow.includes(method));
  const error = new ApiError('method_not_allowed', `This path accepts only ${allow.join(', ')}.`, {
    allow: allow.join(', '),
  });
  app.route({
    method: others,
    url,
    schema: { hide: true },
    onRequest: async () => {
      throw error;
    },
    handler: async () => undefined,
  });
}
