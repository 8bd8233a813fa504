import cors from '@fastify/cors';
import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { DestinationStream } from 'pino';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config.js';
import { handleError, handleNotFound } from './errors.js';
import { answerOf, observeAnswers, recordAnswer } from './http/answers.js';
import { authenticate, createGate } from './http/auth.js';
import { answerClientError } from './http/client-errors.js';
import { capConnections } from './http/connections.js';
import { registerDocs } from './http/docs.js';
import { registerHealth } from './http/health.js';
import { parseJsonBody } from './http/json.js';
import { serverWithFront, type FrontListener } from './http/front.js';
import { refuseOtherMethods, routeEveryMethod, routeEveryRequest } from './http/methods.js';
import { createMetrics, registerMetrics, timeStore } from './http/metrics.js';
import { parseQuery } from './http/query.js';
import { RateLimits } from './http/rate-limit.js';
import { echoRequestId, loggingOptions } from './http/request-log.js';
import { compileValidator } from './http/validation.js';
import { answerCachedPages, PageCache } from './pets/page-cache.js';
import { createPet, getPet, listPets } from './pets/routes.js';
import { sharedSchemas } from './schemas.js';
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
}

/** The whole service, wired. It never listens: `server.ts` does, tests `inject`. */
export async function buildApp({
  config,
  store: plainStore,
  clock = systemClock,
  logger,
  logStream,
}: AppDeps): Promise<FastifyInstance> {
  let front: FrontListener | undefined;
  const metrics = createMetrics(plainStore);
  const app = Fastify({
    // Cached listPets pages are answered before Fastify's lifecycle: see page-cache.ts.
    serverFactory: serverWithFront(() => front),
    ...loggingOptions(config, logger, logStream),
    bodyLimit: BODY_LIMIT,
    // Slow clients are cut off with a 408 (checked every second); the others are not delayed.
    http: {
      maxHeaderSize: HEADER_LIMIT,
      headersTimeout: config.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, config.headersTimeoutMs),
      // RFC 9112 section 3.2's 400 for a missing Host comes from guardRequest, with the Error body.
      requireHostHeader: false,
    },
    requestTimeout: config.requestTimeoutMs,
    // Idle keep-alive connections hold a slot: 5 s by default, like Node's own (docs/hardening.md).
    keepAliveTimeout: config.keepAliveTimeoutMs,
    trustProxy: config.trustProxy.length > 0 ? config.trustProxy : false,
    clientErrorHandler: answerClientError,
    // Requests the router refuses (a malformed percent-encoding) get the Error body too. They
    // meet no hook, so their X-Request-Id is set here, and they are counted and logged once sent.
    frameworkErrors: (error, request, reply) => {
      reply.raw.once('finish', () => recordAnswer(metrics, request.log, undefined, answerOf(request, reply)));
      handleError(error, request, echoRequestId(request, reply));
    },
    // In-flight requests finish during shutdown instead of getting a non-contract 503.
    return503OnClosing: false,
    // A petId of any length reaches getPet, which answers 404 (CONTRACT.md getPet).
    routerOptions: { maxParamLength: HEADER_LIMIT, querystringParser: parseQuery },
  });

  // Declared up front, so every request object keeps one shape.
  app.decorateRequest('apiKeyId', undefined);
  routeEveryMethod(app);
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
  capConnections(app.server, {
    max: config.maxConnections,
    perAddress: config.maxConnectionsPerAddress,
    trusted: config.trustProxy,
  });
  const store = timeStore(plainStore, metrics);
  observeAnswers(app, metrics);
  routeEveryRequest(app.server);
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

  await registerDocs(app, config);
  registerHealth(app, store);

  const gate = createGate(store, new RateLimits(store, clock, config), clock);
  // CORS fields depend on the request's Origin: with CORS on, every answer goes through Fastify.
  const pages = store.memory.finalPages && config.corsOrigins.length === 0 ? new PageCache() : undefined;
  const deps = { store, clock, config, authenticate: authenticate(gate), pages };
  listPets(app, deps);
  createPet(app, deps);
  getPet(app, deps);
  registerMetrics(app, metrics, deps.authenticate);
  if (pages) {
    let closing = false;
    app.addHook('preClose', (done) => {
      closing = true;
      done();
    });
    front = answerCachedPages({ pages, gate, metrics, log: app.log, closing: () => closing });
  }

  refuseOtherMethods(app, '/v1/pets', ['GET', 'POST']);
  refuseOtherMethods(app, '/v1/pets/:petId', ['GET']);
  for (const url of ['/v1/openapi.json', '/healthz', '/readyz', '/metrics']) refuseOtherMethods(app, url, ['GET']);

  return app;
}
