import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import {
  LogController,
  type FastifyBaseLogger,
  type FastifyReply,
  type FastifyRequest,
  type FastifyServerOptions,
} from 'fastify';
import { pino, type DestinationStream } from 'pino';
import type { Config } from '../config.js';
import { oneLine } from '../errors.js';

// A caller's id is kept only when it is short visible ASCII: it lands in logs and a header.
const CALLER_ID = /^[\x21-\x7e]{1,128}$/;

/** The `X-Request-Id` the caller sent, when it is sane; else a new UUID. */
export function readRequestId(request: IncomingMessage): string {
  const given = request.headers['x-request-id'];
  return typeof given === 'string' && CALLER_ID.test(given) ? given : randomUUID();
}

/**
 * Fastify's logging settings. With no `logger` given: JSON lines (pino) at `config.logLevel` on
 * `stream` (standard output by default, through pino's asynchronous destination, written out
 * when the process exits: docs/operations.md#logs), with `reqId` on every line of a
 * request. Fastify's own two lines per request are off: the observability plugin (observability.ts) writes one,
 * with no header, key or body in it. A pino logger given is used as it is; `false` logs nothing.
 */
export function loggingOptions(
  config: Config,
  logger?: FastifyBaseLogger | boolean,
  stream?: DestinationStream,
): Pick<FastifyServerOptions, 'logger' | 'loggerInstance' | 'logController' | 'genReqId'> {
  const requestIds = {
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'reqId' }),
    genReqId: readRequestId,
  };
  if (typeof logger === 'object') return { loggerInstance: logger, ...requestIds };
  // A silent logger rather than none: Fastify times an answer (reply.elapsedTime, the duration
  // histogram's) only when it has a logger or onResponse hooks, and the service adds no such hook.
  if (logger === false) return { logger: { level: 'silent' }, ...requestIds };
  if (logger !== undefined) return { logger, ...requestIds };
  return {
    logger: {
      level: config.logLevel,
      stream: stream ?? pino.destination({ dest: 1, sync: false }),
      // Defence in depth: no line the service writes names this header, but a future one might.
      redact: ['req.headers.authorization', 'headers.authorization'],
    },
    ...requestIds,
  };
}

/** Sets `X-Request-Id` on `reply`: the id the caller sent, or the one made for the request. */
export function echoRequestId(request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return reply.header('x-request-id', request.id);
}

/** Logs a request to `operation` whose client went away before it was answered. */
export function logAborted(request: FastifyRequest, operation: string): void {
  const path = oneLine(request.url.split('?', 1)[0]!);
  request.log.info({ operation, method: request.method, path }, 'request aborted by client');
}

export interface Answer {
  operation: string;
  method: string;
  /** The request target: only its path is logged, since a query may carry anything. */
  url: string;
  status: number;
  seconds: number;
}

/** Whether `log` writes lines of `level`; a logger that cannot tell is taken to. */
const enabled = (log: FastifyBaseLogger, level: string) =>
  (log as { isLevelEnabled?: (level: string) => boolean }).isLevelEnabled?.(level) ?? true;

/** The one line logged for an answered request, on the request's own logger (which names its `reqId`). */
export function logAnswer(log: FastifyBaseLogger, answer: Answer): void {
  if (!enabled(log, 'info')) return;
  const line = {
    operation: answer.operation,
    method: answer.method,
    // JSON escapes only C0 controls; a log viewer prints C1 controls and separators raw.
    path: oneLine(answer.url.split('?', 1)[0]!),
    status: answer.status,
    durationMs: Math.round(answer.seconds * 1e6) / 1000,
  };
  log.info(line, 'request completed');
}
