import { METHODS, ServerResponse, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyInstance, preParsingHookHandler } from 'fastify';
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

/**
 * Routes the requests Node's HTTP server would otherwise answer itself without the Error body:
 * an `Expect` other than 100-continue (a bare 417), which RFC 9110 section 10.1.1 lets a server
 * ignore, and CONNECT (whose socket it drops), which paths then refuse like any other method,
 * in its turn after the answers before it, then the connection is closed.
 * `Expect: 100-continue` is routed without Node's immediate `100 Continue`: continueOnceAdmitted
 * sends it once the request has passed its checks, so a request refused (401, 403, 413…) gets
 * its final answer alone.
 * A client that half-closes right after its request (`printf … | nc`) still gets its answer,
 * even when the store answers asynchronously; Node's default aborts the request instead.
 */
export function routeEveryRequest(server: Server): void {
  Object.assign(server, { httpAllowHalfOpen: true });
  server.on('checkExpectation', (request, response) => server.emit('request', request, response));
  server.on('checkContinue', (request, response) => server.emit('request', request, response));
  server.on('connect', (request: IncomingMessage, socket: Socket) => {
    socket.on('error', () => socket.destroy());
    // Answers to requests before it may still be on their way (pipelined, or a CONNECT sent
    // while one is pending): this answer goes after them (RFC 9112 section 9.3.2). Like a
    // pipelined request's, its response has no socket until its turn, which capConnections
    // gives it; meanwhile what is written to it waits in the response.
    const response = new ServerResponse(request);
    response.shouldKeepAlive = false;
    // The socket is no tunnel, and node:http no longer reads it: closed once the answer is flushed.
    response.once('finish', () => socket.destroySoon());
    server.emit('request', request, response);
  });
}

const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i;

/**
 * `preParsing` hook of the route that reads a body (createPet): the `100 Continue` an HTTP/1.1
 * client asked for before sending its body (RFC 9110 section 10.1.1), sent when the request has
 * passed every `onRequest` check (the key among them) and its body is about to be read. A
 * request refused before that gets its final answer without one (docs/hardening.md#framing), and Node
 * then closes the connection, whose client may still send the body; so does a request to a
 * route that reads no body, whose final status the RFC allows in place of `100 Continue`.
 */
export const continueOnceAdmitted: preParsingHookHandler = (request, reply, payload, done) => {
  const { headers } = request;
  const expectsBody = headers['transfer-encoding'] !== undefined || Number(headers['content-length'] ?? 0) > 0;
  if (
    headers.expect !== undefined &&
    expectsBody &&
    request.raw.httpVersion === '1.1' &&
    !reply.raw.headersSent &&
    CONTINUE.test(headers.expect)
  ) {
    reply.raw.writeContinue();
  }
  done(null, payload);
};
