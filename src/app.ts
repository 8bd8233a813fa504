import cors from '@fastify/cors';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { DestinationStream } from 'pino';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config.js';
import { handleError, handleNotFound } from './errors.js';
import { auth } from './http/auth.js';
import { answerClientError } from './http/client-errors.js';
import { serveHttp } from './http/connections.js';
import { afterAnswers } from './http/pipelining.js';
import { registerDocs } from './http/docs.js';
import { hardening } from './http/hardening.js';
import { registerHealth } from './http/health.js';
import { parseJsonBody } from './http/json.js';
import { secureReply } from './http/limits.js';
import { refuseOtherMethods } from './http/methods.js';
import { clientAddress } from './http/addresses.js';
import { RateLimits } from './http/rate-limit.js';
import { createMetrics, registerMetrics } from './http/metrics.js';
import { observability } from './http/observability.js';
import { parseQuery } from './http/query.js';
import { loggingOptions } from './http/request-log.js';
import { tracing } from './http/tracing.js';
import { compileValidator } from './http/validation.js';
import { events, type EventsOptions } from './events/events.js';
import { keyMemory } from './keys/memory.js';
import { pets } from './pets/pets.js';
import { sharedSchemas } from './schemas.js';
import { InstrumentedStore } from './store/instrumented.js';
import type { Store } from './store/store.js';

export const BODY_LIMIT = 16 * 1024;
export const HEADER_LIMIT = 16 * 1024;

export interface AppDeps {
  config: Config;
  store: Store;
  clock?: Clock;
  /** A pino logger; by default one at `config.logLevel` on `logStream`. */
  logger?: FastifyBaseLogger | boolean;
  /** Where the default logger writes its JSON lines; standard output when absent. */
  logStream?: DestinationStream;
  /** How long a rate-limit hit waits in memory before it is added to the store's counts (200 ms). */
  hitFlushMs?: number;
  /** How long a key's use waits in memory before it is written (10 s, keys/uses.ts). */
  keyUseFlushMs?: number;
  /** How often expired events are looked for (src/events/retention.ts); every minute by default. */
  eventPruneEveryMs?: number;
  /**
   * Whether this app's process delivers webhooks (src/events/work.ts): `serve` passes
   * PETSTORE_WEBHOOK_DELIVERY; off by default, so an app a test builds delivers only when asked.
   */
  deliverWebhooks?: boolean;
  /** The relay's own options (src/events/relay.ts) and its grace on close, for tests. */
  relay?: EventsOptions['relay'] & { graceMs?: number };
}

/**
 * The whole service, wired. It never listens: `server.ts` does, tests `inject`. Every request
 * takes one way: the plugins' hooks in the order registered here (tracing, when on; observability,
 * hardening, CORS, then each route's key check), validation, the handler, the Store.
 */
export async function buildApp({
  config,
  store: plainStore,
  clock = systemClock,
  logger,
  logStream,
  hitFlushMs,
  keyUseFlushMs,
  eventPruneEveryMs,
  deliverWebhooks = false,
  relay: { graceMs, ...relay } = {},
}: AppDeps): Promise<FastifyInstance> {
  const metrics = createMetrics(plainStore, clock);
  const store = new InstrumentedStore(
    plainStore,
    metrics.observeStoreCall,
    config.databaseUrl ? 'postgresql' : 'sqlite',
  );
  // The per-key and refused-key limits: the auth plugin counts them; answers given before any
  // key is read carry the client address's "refused-keys" fields, uncounted (docs/api.md#rate-limits).
  const limits = new RateLimits(store, clock, config, hitFlushMs);
  // Keys found lately, and their uses to write: most requests cost no database work for their key.
  // By the system's clock, as its timers are: how long a revoked key may still be served is real
  // time, whatever clock the service's answers follow (expiry is judged by that one, in auth.ts).
  const keys = keyMemory(store, { keyUseFlushMs });
  const app = Fastify({
    ...loggingOptions(config, logger, logStream),
    bodyLimit: BODY_LIMIT,
    // The node:http server, with every one of its options, and the connection limits
    // (docs/hardening.md#connections). Slow clients are cut off with a 408 (checked every
    // second); the others are not delayed.
    serverFactory: serveHttp(
      {
        maxHeaderSize: HEADER_LIMIT,
        headersTimeout: config.headersTimeoutMs,
        requestTimeout: config.requestTimeoutMs,
        connectionsCheckingInterval: Math.min(1000, config.headersTimeoutMs),
        // Idle keep-alive connections hold a slot: 5 s by default, like Node's own (docs/hardening.md).
        keepAliveTimeout: config.keepAliveTimeoutMs,
        // RFC 9112 section 3.2's 400 for a missing Host comes from guardRequest, with the Error body.
        requireHostHeader: false,
      },
      {
        max: config.maxConnections,
        perAddress: config.maxConnectionsPerAddress,
        trusted: config.trustProxy,
        stallTimeoutMs: config.stallTimeoutMs,
        onClose: metrics.countClosedConnection,
        // At most one line a second per reason (docs/operations.md#logs).
        onReport: ({ reason, group, closed }) =>
          app.log.warn({ reason, addressGroup: group, closed }, `connections closed by the service: ${reason}`),
      },
    ),
    trustProxy: config.trustProxy.length > 0 ? config.trustProxy : false,
    // After the answers still on their way on the connection: written at once, it would corrupt them.
    clientErrorHandler: (error, socket) =>
      afterAnswers(socket, () =>
        answerClientError(error, socket, socket.remoteAddress ? limits.peekRefused(socket.remoteAddress) : undefined),
      ),
    // Requests the router refuses (a malformed percent-encoding) meet no hook: they get the
    // Error body, the security fields, the request id, the count and the log line here.
    frameworkErrors: (error, request, reply) => {
      app.recordAnswer(request, reply);
      handleError(error, request, secureReply(request, reply));
    },
    // In-flight requests finish during shutdown instead of getting a non-contract 503.
    return503OnClosing: false,
    // A petId of any length reaches getPet, which answers 404 (docs/api.md#deprecation-of-getpet).
    routerOptions: { maxParamLength: HEADER_LIMIT, querystringParser: parseQuery },
  });

  app.setValidatorCompiler(compileValidator);
  for (const schema of sharedSchemas) app.addSchema(schema);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    try {
      done(null, parseJsonBody(request, body as Buffer));
    } catch (error) {
      done(error as Error, undefined);
    }
  });
  app.setErrorHandler(handleError);
  app.setNotFoundHandler(handleNotFound);

  await app.register(tracing);
  await app.register(observability, { metrics });
  await app.register(hardening, {
    earlyFields: (request) => limits.peekRefused(clientAddress(request)),
  });
  if (config.corsOrigins.length > 0) {
    await app.register(cors, {
      origin: config.corsOrigins.includes('*') ? '*' : config.corsOrigins,
      methods: ['GET', 'HEAD', 'POST'],
      allowedHeaders: ['Authorization', 'Content-Type', 'Idempotency-Key', 'X-Request-Id'],
      exposedHeaders: [
        'Location',
        'Link',
        'Retry-After',
        'RateLimit',
        'RateLimit-Policy',
        'Idempotent-Replayed',
        'X-Request-Id',
      ],
      maxAge: 600,
      // A preflight without Origin is answered like any other, not with a text/plain 400.
      strictPreflight: false,
    });
  }
  await app.register(auth, { keys, clock, limits });

  await registerDocs(app, config);
  registerHealth(app, store);
  await app.register(pets, {
    store,
    config,
    countDeprecatedCall: metrics.countDeprecatedCall,
    noteDeprecatedUse: keys.noteDeprecatedUse,
  });
  await app.register(events, {
    store,
    clock,
    config,
    deliver: deliverWebhooks,
    countAttempt: metrics.countWebhookAttempt,
    pruneEveryMs: eventPruneEveryMs,
    relay,
    graceMs,
  });
  registerMetrics(app, metrics, app.authenticate);
  for (const url of ['/v1/openapi.json', '/healthz', '/readyz', '/metrics']) refuseOtherMethods(app, url, ['GET']);

  return app;
}
