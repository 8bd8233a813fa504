import Fastify, { type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import { systemClock, type Clock } from './clock.js';
import type { Config } from './config.js';
import { handleError, handleNotFound, notFound } from './errors.js';
import { authenticate } from './http/auth.js';
import { answerClientError } from './http/client-errors.js';
import { registerDocs } from './http/docs.js';
import { registerHealth } from './http/health.js';
import { parseJsonBody } from './http/json.js';
import { refuseOtherMethods, routeEveryMethod } from './http/methods.js';
import { parseQuery } from './http/query.js';
import { compileValidator } from './http/validation.js';
import { createPet, getPet, listPets } from './pets/routes.js';
import { sharedSchemas } from './schemas.js';
import type { Store } from './store/store.js';

export const BODY_LIMIT = 16 * 1024;
export const HEADER_LIMIT = 16 * 1024;

export interface AppDeps {
  config: Config;
  store: Store;
  clock?: Clock;
  /** A pino logger; by default one at `config.logLevel` on standard output. */
  logger?: FastifyBaseLogger | boolean;
}

/** The whole service, wired. It never listens: `server.ts` does, tests `inject`. */
export async function buildApp({ config, store, clock = systemClock, logger }: AppDeps): Promise<FastifyInstance> {
  const app = Fastify({
    ...(logger && typeof logger === 'object'
      ? { loggerInstance: logger }
      : { logger: logger ?? { level: config.logLevel, redact: ['req.headers.authorization'] } }),
    bodyLimit: BODY_LIMIT,
    http: { maxHeaderSize: HEADER_LIMIT },
    clientErrorHandler: answerClientError,
    // Requests the router refuses (a malformed percent-encoding) get the Error body too.
    frameworkErrors: handleError,
    // In-flight requests finish during shutdown instead of getting a non-contract 503.
    return503OnClosing: false,
    // A petId of any length reaches getPet, which answers 404 (CONTRACT.md getPet).
    routerOptions: { maxParamLength: HEADER_LIMIT, querystringParser: parseQuery },
  });

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
  // An unknown path is a 404 before any body is read or refused. A callback hook: it runs on
  // every request, and costs no promise there.
  app.addHook('onRequest', (request, _reply, done) => done(request.is404 ? notFound() : undefined));

  await registerDocs(app, config);
  registerHealth(app, store);

  const deps = { store, clock, config, authenticate: authenticate(store) };
  listPets(app, deps);
  createPet(app, deps);
  getPet(app, deps);

  refuseOtherMethods(app, '/v1/pets', ['GET', 'POST']);
  refuseOtherMethods(app, '/v1/pets/:petId', ['GET']);
  for (const url of ['/v1/openapi.json', '/healthz', '/readyz']) refuseOtherMethods(app, url, ['GET']);

  return app;
}
