import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** Requests waiting behind the one being answered at which the connection's reading stops until half of them are let through. */
export const PIPELINE_HOLD = 16;

/**
 * Most requests one connection may have waiting behind the one being answered. Node parses a
 * whole read (up to 64 KiB, over a thousand small requests) at once, so stopping the reading
 * cannot stop a read already made; requests past this are never answered: those admitted are,
 * then the connection is closed, and RFC 9112 section 9.3.2 has the client retry the others on
 * a new one.
 */
export const PIPELINE_LIMIT = 64;

export type RequestListener = (request: IncomingMessage, response: ServerResponse) => void;

interface Waiting {
  request: IncomingMessage;
  response: ServerResponse;
  /** Left unanswered by the app: its request was cut short by a parser error (afterAnswers). */
  dropped: boolean;
}

/** What the gate keeps of one connection: part of its one record (src/http/connections.ts). */
export interface Pipeline {
  readonly socket: Socket;
  /** The answer it is on, or was last on: node:http's ServerResponse holds the socket until it is flushed. */
  response: ServerResponse | undefined;
  /** Bytes read when its latest request had arrived whole (slot-policy.ts: idle). */
  readWhole: number;
  /** Requests received behind the answer in progress, oldest first. */
  pipelined: Waiting[];
  /** True while its reading is stopped for too many waiting requests. */
  held: boolean;
  /** True once it closes after the answers admitted: its reading stopped for good. */
  full: boolean;
  /** Giving up its slot: closes after the answers it has received requests for. */
  releasing: boolean;
  /** Giving it up between two requests: its next answer is its last. */
  closeNext: boolean;
  /** What afterAnswers runs once the answers it waits for are handed over. */
  then: (() => void) | undefined;
}

const kPipeline = Symbol('petstore.pipeline');
type Tracked = Socket & { [kPipeline]?: Pipeline };

/** Gives `socket` its record: the gate and afterAnswers find it there (one property read). */
export function track(socket: Socket, pipeline: Pipeline): void {
  (socket as Tracked)[kPipeline] = pipeline;
  // node:http resumes reading when an answer is done; a held connection stops again at once.
  socket.on('resume', () => {
    if (pipeline.held) socket.pause();
  });
}

/** The answer in progress on the connection, if any: node:http takes the socket back (`response.socket` null) once it is flushed. */
export function answeringOn(pipeline: Pipeline): ServerResponse | undefined {
  const { response, socket } = pipeline;
  return response !== undefined && response.socket === socket ? response : undefined;
}

/**
 * Ends the connection after the answers to the requests it has received whole (RFC 9112
 * section 9.6: the last says `Connection: close`, and node:http closes the connection after
 * it): its reading stops, unless a request is still arriving, whose answer is then the last.
 * Never a request admitted cut off. True when its reading stopped for good.
 */
export function closeAfterAdmitted(pipeline: Pipeline): boolean {
  pipeline.releasing = true;
  const last = pipeline.pipelined.at(-1);
  const current = answeringOn(pipeline);
  if (last !== undefined) {
    last.response.setHeader('connection', 'close');
    if (!last.request.complete) return false;
  } else if (current !== undefined) {
    if (!current.headersSent) current.setHeader('connection', 'close');
    else current.once('finish', () => pipeline.socket.destroySoon());
    if (!current.req.complete) return false;
  } else {
    // Between two requests: its next answer says `Connection: close` (dispatch).
    pipeline.closeNext = true;
    return false;
  }
  pipeline.held = true;
  pipeline.full = true;
  pipeline.socket.pause();
  return true;
}

/** Hands `request` to `handler` as the answer its connection is on: the last one when the connection gives up its slot. */
function dispatch(
  pipeline: Pipeline | undefined,
  request: IncomingMessage,
  response: ServerResponse,
  handler: RequestListener,
) {
  if (pipeline !== undefined) {
    pipeline.response = response;
    // What was read with its head; a body, when it has one, is read after. (A GET or HEAD is
    // taken to have none: one that had would look busy, never idle, to the slot policy.)
    pipeline.readWhole = pipeline.socket.bytesRead;
    if (request.method !== 'GET' && request.method !== 'HEAD' && !request.complete) {
      request.once('end', () => (pipeline.readWhole = pipeline.socket.bytesRead));
    }
    if (pipeline.closeNext && !response.headersSent) response.setHeader('connection', 'close');
  }
  handler(request, response);
}

/**
 * Gives `response` its connection's socket: the answer to a CONNECT (routeEveryRequest), whose
 * turn comes once every answer before it on the connection is done. False, and the socket
 * destroyed, when it cannot take the answer (closed, or still carrying another: never thrown,
 * which would stop the process).
 */
function handOver(socket: Socket, response: ServerResponse): boolean {
  if (response.socket !== null) return true;
  if (!socket.destroyed && socket.writable) {
    try {
      response.assignSocket(socket);
      return true;
    } catch {
      // ERR_HTTP_SOCKET_ASSIGNED: the answer before it is still on the socket.
    }
  }
  socket.destroy();
  return false;
}

/**
 * The server's one `'request'` listener: it passes a request on to `handler` at once when its
 * answer is the connection's next (node:http has given its response the socket: one property
 * read). One received behind an answer in progress waits for node:http to hand its response
 * the socket; with PIPELINE_HOLD waiting the connection's reading stops until half are let
 * through, and past PIPELINE_LIMIT it stops for good (`tooDeep` is told): the connection is
 * closed once those admitted are answered. So one connection never holds more than one answer
 * in the process.
 */
export function gateRequests<P extends Pipeline>(
  handler: RequestListener,
  tooDeep: (pipeline: P) => void,
): RequestListener {
  // A CONNECT (routeEveryRequest) is answered once the answers before it are done.
  const connectInTurn = (socket: Socket, request: IncomingMessage, response: ServerResponse) => {
    const pipeline = (socket as Tracked)[kPipeline];
    const start = () => {
      if (handOver(socket, response)) dispatch(pipeline, request, response, handler);
    };
    const ahead = pipeline && (pipeline.pipelined.at(-1)?.response ?? answeringOn(pipeline));
    if (!ahead) start();
    else ahead.once('close', start);
  };
  // Past the limit, reading stops for good and the requests admitted are answered, the last with
  // `Connection: close`. The requests read past the limit never reach the app: the client
  // retries them on a new connection (RFC 9112 section 9.3.2).
  const refusePast = (pipeline: Pipeline) => {
    if (closeAfterAdmitted(pipeline)) tooDeep(pipeline as P);
  };
  // A request received behind an answer in progress: node:http hands its response the socket
  // (the 'socket' event) once the answers before it are in the kernel's hands.
  const wait = (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket;
    // The rest of a read that follows a request that closed its connection.
    if (socket.destroyed) return;
    if (request.method === 'CONNECT') return connectInTurn(socket, request, response);
    const pipeline = (socket as Tracked)[kPipeline];
    if (pipeline === undefined) {
      response.once('socket', () => dispatch(pipeline, request, response, handler));
      return;
    }
    if (pipeline.full) return;
    if (pipeline.pipelined.length >= PIPELINE_LIMIT) return refusePast(pipeline);
    const entry: Waiting = { request, response, dropped: false };
    pipeline.pipelined.push(entry);
    if (pipeline.pipelined.length >= PIPELINE_HOLD && !pipeline.held) {
      pipeline.held = true;
      socket.pause();
    }
    response.once('socket', () => {
      const at = pipeline.pipelined.indexOf(entry);
      if (at >= 0) pipeline.pipelined.splice(at, 1);
      if (pipeline.held && !pipeline.full && pipeline.pipelined.length <= PIPELINE_HOLD / 2) {
        pipeline.held = false;
        socket.resume();
      }
      if (!entry.dropped) dispatch(pipeline, request, response, handler);
    });
  };
  return function gate(request: IncomingMessage, response: ServerResponse) {
    const socket = response.socket;
    // Its answer is the connection's next: node:http gave it the socket.
    if (socket !== null) return dispatch((socket as Tracked)[kPipeline], request, response, handler);
    wait(request, response);
  };
}

/**
 * Runs `then` once every request received whole on `socket` so far is answered (handed to the
 * kernel), at once when none waits; never if the connection closes first. For node:http's
 * parser errors and timeouts (the clientError event), whose answer written at once to the
 * socket would land before, or inside, answers still on their way: it goes after them, in turn
 * (RFC 9112 section 9.3.2). The request being received when the error came (a body cut short)
 * is left unanswered by the app: `then` answers it. When that request has been answered
 * already (an early 401 while its body was arriving), the connection is closed after that
 * answer instead, and `then` does not run: a request gets one answer.
 */
export function afterAnswers(socket: Socket, then: () => void): void {
  const pipeline = (socket as Tracked)[kPipeline];
  const current = pipeline && answeringOn(pipeline);
  if (pipeline === undefined || current === undefined) return then();
  if (pipeline.then !== undefined) return;
  const whole = pipeline.pipelined.filter((entry) => {
    entry.dropped = !entry.request.complete;
    return !entry.dropped;
  });
  if (current.req.complete || whole.length > 0) {
    pipeline.then = then;
  } else if (current.headersSent) {
    pipeline.then = () => socket.destroy();
  } else {
    return then();
  }
  // A response closes once the whole answer is in the kernel's hands, or when it never will be.
  (whole.at(-1)?.response ?? current).once('close', () => {
    if (!socket.destroyed) pipeline.then?.();
  });
}
