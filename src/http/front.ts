import type { IncomingMessage, ServerOptions, ServerResponse } from 'node:http';
import type { FastifyServerFactory } from 'fastify';
import { createServer } from './node-http.js';

/** A request listener that answers some requests itself: true when it did. */
export type FrontListener = (request: IncomingMessage, response: ServerResponse) => boolean;

interface FactoryOptions {
  http?: ServerOptions;
  keepAliveTimeout: number;
  requestTimeout: number;
  connectionTimeout: number;
  maxRequestsPerSocket: number;
}

/**
 * Fastify's `serverFactory`: the node:http server Fastify makes itself (its settings as
 * Fastify's lib/server.js applies them), whose requests meet `front()`, once it is set, before
 * Fastify. What the front answers never reaches Fastify; the rest goes on unchanged.
 */
export function serverWithFront(front: () => FrontListener | undefined): FastifyServerFactory {
  return (handler, opts) => {
    const options = opts as unknown as FactoryOptions;
    const server = createServer(options.http ?? {}, (request, response) => {
      if (front()?.(request, response) !== true) handler(request, response);
    });
    server.keepAliveTimeout = options.keepAliveTimeout;
    server.requestTimeout = options.requestTimeout;
    server.setTimeout(options.connectionTimeout);
    if (options.maxRequestsPerSocket > 0) server.maxRequestsPerSocket = options.maxRequestsPerSocket;
    return server;
  };
}
