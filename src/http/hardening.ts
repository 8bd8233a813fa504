import type { FastifyRequest } from 'fastify';
import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { capConnections } from './connections.js';
import { guardRequests } from './limits.js';
import type { Metrics } from './metrics.js';
import type { RateFields } from './rate-limit.js';
import { routeEveryMethod, routeEveryRequest } from './methods.js';

export interface HardeningOptions {
  config: Config;
  metrics: Metrics;
  /** The RateLimit fields of a refusal made before any key is read (guardRequests). */
  earlyFields?: (request: FastifyRequest) => RateFields;
}

/**
 * Limits on what a client may hold or send, before any route runs: connection caps (in all and
 * per address), every method and request routed so that Fastify answers each with the Error
 * body, and guardRequests' security headers and refusals on every request.
 */
export const hardening = fp<HardeningOptions>(
  async (app, { config, metrics, earlyFields = () => undefined }) => {
    routeEveryMethod(app);
    capConnections(app.server, {
      max: config.maxConnections,
      perAddress: config.maxConnectionsPerAddress,
      trusted: config.trustProxy,
      stallTimeoutMs: config.stallTimeoutMs,
      onClose: metrics.countClosedConnection,
    });
    routeEveryRequest(app.server);
    app.addHook('onRequest', guardRequests(earlyFields));
  },
  { name: 'petstore-hardening' },
);
