import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import { guardRequests } from './limits.js';
import type { RateFields } from './rate-limit.js';
import { routeEveryMethod, routeEveryRequest } from './methods.js';

export interface HardeningOptions {
  /** The RateLimit fields of a refusal made before any key is read (guardRequests). */
  earlyFields?: (request: FastifyRequest) => RateFields;
}

/**
 * Limits on what a client may send, before any route runs (the connection limits are the
 * server's own: serveHttp in app.ts): every method and request routed so that Fastify answers
 * each with the Error body, and guardRequests' security headers and refusals on every request.
 */
export const hardening = fp<HardeningOptions>(
  async (app, { earlyFields = () => undefined }) => {
    routeEveryMethod(app);
    routeEveryRequest(app.server);
    app.addHook('onRequest', guardRequests(earlyFields));
  },
  { name: 'petstore-hardening' },
);
