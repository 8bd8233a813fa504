import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { LogController, type FastifyInstance, type FastifyServerOptions } from 'fastify';
import type { Config } from '../config.js';
import { operationOf } from './operation.js';

// A caller's id is kept only when it is short visible ASCII: it lands in logs and a header.
const CALLER_ID = /^[\x21-\x7e]{1,128}$/;

/** The `X-Request-Id` the caller sent, when it is sane; else a new UUID. */
export function readRequestId(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && CALLER_ID.test(given) ? given : randomUUID();
}

/**
 * Fastify's logging settings: JSON lines (pino) at `config.logLevel` on `stream` (standard
 * output by default), with `reqId` on every line of a request. Fastify's own two lines per
 * request are off: `logRequests` writes one, with no header, key or body in it.
 */
export function loggingOptions(
  config: Config,
  stream?: NodeJS.WritableStream,
): Pick<FastifyServerOptions, 'logger' | 'logController' | 'genReqId'> {
  return {
    logger: {
      level: config.logLevel,
      ...(stream && { stream }),
      // Defence in depth: no line the service writes names this header, but a future one might.
      redact: ['req.headers.authorization', 'headers.authorization'],
    },
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'reqId' }),
    genReqId: readRequestId,
  };
}

/**
 * Echoes the request id in `X-Request-Id` on every response, errors included, and logs one line
 * per answered request: `reqId`, `operation`, `method`, `path` (no query string), `status`,
 * `durationMs`.
 */
export function logRequests(app: FastifyInstance): void {
  app.addHook('onSend', (request, reply, payload, done) => {
    reply.header('x-request-id', request.id);
    done(null, payload);
  });
  app.addHook('onResponse', (request, reply, done) => {
    const path = request.url.split('?', 1)[0];
    const durationMs = Math.round(reply.elapsedTime * 1000) / 1000;
    request.log.info(
      { operation: operationOf(request), method: request.method, path, status: reply.statusCode, durationMs },
      'request completed',
    );
    done();
  });
  app.addHook('onRequestAbort', (request, done) => {
    const path = request.url.split('?', 1)[0];
    request.log.info({ operation: operationOf(request), method: request.method, path }, 'request aborted by client');
    done();
  });
}
