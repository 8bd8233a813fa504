import fp from 'fastify-plugin';
import type { Config } from '../config.js';
import { capConnections } from './connections.js';
import { guardRequest } from './limits.js';
import type { Metrics } from './metrics.js';
import { continueOnceAdmitted, routeEveryMethod, routeEveryRequest } from './methods.js';

export interface HardeningOptions {
  config: Config;
  metrics: Metrics;
}

/**
 * Limits on what a client may hold or send, before any route runs: connection caps (in all and
 * per address), every method and request routed so that Fastify answers each with the Error
 * body, and guardRequest's security headers and refusals on every request.
 */
export const hardening = fp<HardeningOptions>(
  async (app, { config, metrics }) => {
    routeEveryMethod(app);
    capConnections(app.server, {
      max: config.maxConnections,
      perAddress: config.maxConnectionsPerAddress,
      trusted: config.trustProxy,
      stallTimeoutMs: config.stallTimeoutMs,
      onClose: metrics.countClosedConnection,
    });
    routeEveryRequest(app.server);
    app.addHook('onRequest', guardRequest);
    app.addHook('preParsing', continueOnceAdmitted);
  },
  { name: 'petstore-hardening' },
);
