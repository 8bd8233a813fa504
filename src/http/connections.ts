import type { IncomingMessage, ServerResponse } from 'node:http';
import { isIP, type Server, type Socket } from 'node:net';
import { addressGroup, blockListOf } from './addresses.js';
import { answerClientError } from './client-errors.js';

/** Why the service closed a connection itself, as `petstore_connections_closed_total` counts it. */
export type CloseReason =
  /** Its answers were not read: nothing of them left for PETSTORE_STALL_TIMEOUT_MS. */
  | 'slow_reader'
  /** Its request's body stopped arriving for PETSTORE_STALL_TIMEOUT_MS (answered 408). */
  | 'no_progress'
  /** More than PIPELINE_LIMIT requests waited on it for their answers (closed after those admitted). */
  | 'pipeline_depth'
  /** It had sent nothing yet, and made room for a new connection. */
  | 'silent_evicted'
  /** Its address group held PETSTORE_MAX_CONNECTIONS_PER_ADDRESS busy connections already. */
  | 'address_full'
  /** Every one of PETSTORE_MAX_CONNECTIONS slots was busy (Node closes it as it opens). */
  | 'server_full';

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

export interface ConnectionCaps {
  /** Most connections open at once (PETSTORE_MAX_CONNECTIONS). */
  max: number;
  /** Most open at once from one address group (PETSTORE_MAX_CONNECTIONS_PER_ADDRESS); undefined: no such cap. */
  perAddress: number | undefined;
  /** Proxies (PETSTORE_TRUST_PROXY), which carry many clients: not capped per address. */
  trusted: string[];
  /** Longest wait on a client that makes no progress (PETSTORE_STALL_TIMEOUT_MS); undefined: no such limit. */
  stallTimeoutMs?: number;
  /** Told each time a connection is closed here or refused for want of a slot (for /metrics). */
  onClose?: (reason: CloseReason) => void;
}

type RequestListener = (request: IncomingMessage, response: ServerResponse) => void;

/**
 * Gives `response` its connection's socket if node:http has not: the answer to a CONNECT
 * (routeEveryRequest), whose turn comes once every answer before it on the connection is done,
 * when the socket carries none. False, and the socket destroyed, when it cannot take the answer
 * (closed, or still carrying another: never thrown, which would stop the process).
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

interface Connection {
  group: string;
  mine: Set<Socket> | undefined;
  /** The request being answered and its answer, and those received behind it, oldest first. */
  current: [IncomingMessage, ServerResponse] | undefined;
  waiting: [IncomingMessage, ServerResponse][];
  /** True while its reading is stopped for too many waiting requests. */
  held: boolean;
  /** True once more than PIPELINE_LIMIT waited: its reading stopped for good, it closes after the answers it admitted. */
  full: boolean;
  /** Bytes read plus bytes the kernel took, at the last check, and when it last changed or the connection last waited on nothing from its client. */
  seen: number;
  since: number;
  /** Answered 408 for a stalled body: destroyed at the next check if the answer could not be flushed. */
  ending: boolean;
  /** What afterAnswers runs once the answers it waits for are handed over. */
  then: (() => void) | undefined;
}

/**
 * Closes `socket` with a reset (RST) rather than a FIN, for the connections the service closes
 * for its limits (docs/hardening.md#connections): the kernel then drops what it still holds of
 * their answers at once, where after a FIN it keeps it, for a client that may never read it,
 * until it gives up.
 */
function reset(socket: Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    // Not a TCP socket: it has no reset to send.
    socket.destroy();
  }
}

/** Every open connection's record, for afterAnswers. */
const records = new WeakMap<Socket, Connection>();

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
  const connection = records.get(socket);
  if (connection === undefined || connection.current === undefined) return then();
  if (connection.then !== undefined) return;
  connection.waiting = connection.waiting.filter(([request]) => request.complete);
  const [request, response] = connection.current;
  if (request.complete || connection.waiting.length > 0) {
    connection.then = then;
  } else if (response.headersSent) {
    connection.then = () => socket.destroy();
  } else {
    then();
  }
}

/** Bytes the connection read, plus those of its answers the kernel took (what is still queued in the process is left out). */
const progressOf = (socket: Socket) => socket.bytesRead + (socket.bytesWritten ?? 0) - socket.writableLength;

/** True while the connection can go on only if its client does something: read its answers, or send the rest of a body. */
const waitsOnClient = (socket: Socket, connection: Connection) =>
  socket.writableLength > 0 || (connection.current !== undefined && !connection.current[0].complete);

const stalledBody = Object.assign(new Error('Request body stalled'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });

/**
 * Caps the connections open at once, in all and per address group (see addressGroup), so that
 * clients that open connections and send nothing cannot keep the others out:
 *
 * - past the per-address cap, the group's oldest connection that has sent nothing yet is
 *   closed to make room; when every one of them has sent something, the new one is closed;
 * - when the last of `max` slots is taken, the oldest connection that has sent nothing yet is
 *   closed, so the next client finds a slot; past `max`, node:http closes a new connection
 *   as soon as it opens.
 *
 * A connection's requests are let through to the app one at a time: the next when the answer
 * before it has been handed to the kernel. So one connection never holds more than one answer
 * in the process, however many requests it pipelines; with PIPELINE_HOLD requests waiting, its
 * reading stops until they are answered, and past PIPELINE_LIMIT it stops for good: the
 * connection is closed once those admitted are answered. A connection that waits on its client
 * (answers unread, a body not arriving) and makes no progress for `stallTimeoutMs` is reset,
 * checked every second at most. One that sends nothing meets the header timeout instead. Only
 * open connections are remembered.
 */
export function capConnections(
  server: Server,
  { max, perAddress, trusted, stallTimeoutMs, onClose = () => {} }: ConnectionCaps,
): void {
  server.maxConnections = max;
  server.on('drop', () => onClose('server_full'));
  // An idle keep-alive connection is closed after PETSTORE_KEEP_ALIVE_TIMEOUT_MS (node:http's
  // socket timeout, which this listener takes over) with a reset too: answers the client never
  // read may still fill the kernel's buffers, and a reset is the same "closed" to a pool.
  server.on('timeout', reset);
  const proxies = blockListOf(trusted);
  const isProxy = (address: string) =>
    trusted.length > 0 && proxies.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
  // Open connections, oldest first, with their group's set when capped per address.
  const open = new Map<Socket, Connection>();
  const byGroup = new Map<string, Set<Socket>>();
  const forget = (socket: Socket) => {
    const entry = open.get(socket);
    if (!entry) return;
    open.delete(socket);
    records.delete(socket);
    entry.waiting.length = 0;
    entry.mine?.delete(socket);
    if (entry.mine?.size === 0) byGroup.delete(entry.group);
  };
  const close = (socket: Socket, reason: CloseReason) => {
    // One already counted for its depth is not counted again when it stalls.
    const counted = open.get(socket)?.full === true;
    forget(socket);
    if (reason === 'silent_evicted') socket.destroy();
    else reset(socket);
    if (!counted) onClose(reason);
  };
  // Past the limit, reading stops for good and the requests admitted are answered, the last with
  // `Connection: close`, after which node:http closes the connection (RFC 9112 section 9.6). The
  // requests read past the limit never reach the app: the client retries them on a new
  // connection (RFC 9112 section 9.3.2). One that does not read its answers is reset when it
  // stalls, as any other.
  const refusePast = (connection: Connection, socket: Socket) => {
    connection.full = true;
    connection.held = true;
    socket.pause();
    connection.waiting.at(-1)?.[1].setHeader('connection', 'close');
    onClose('pipeline_depth');
  };
  // The oldest connection of `among` that has sent nothing yet, other than `spare`, is closed.
  const closeOldestSilent = (among: Iterable<Socket>, spare: Socket): boolean => {
    for (const socket of among) {
      if (socket !== spare && socket.bytesRead === 0) {
        close(socket, 'silent_evicted');
        return true;
      }
    }
    return false;
  };
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    const group = addressGroup(address);
    let mine: Set<Socket> | undefined;
    if (perAddress !== undefined && !isProxy(address)) {
      mine = byGroup.get(group);
      if (!mine) byGroup.set(group, (mine = new Set()));
      if (mine.size >= perAddress && !closeOldestSilent(mine, socket)) {
        socket.destroy();
        return onClose('address_full');
      }
      mine.add(socket);
      // Closing the last other one may have let go of the set.
      byGroup.set(group, mine);
    }
    const connection: Connection = {
      group,
      mine,
      current: undefined,
      waiting: [],
      held: false,
      full: false,
      seen: 0,
      since: 0,
      ending: false,
      then: undefined,
    };
    open.set(socket, connection);
    records.set(socket, connection);
    socket.once('close', () => forget(socket));
    // node:http resumes reading when an answer is done; a held connection stops again at once.
    socket.on('resume', () => {
      if (connection.held) socket.pause();
    });
    if (open.size >= max) closeOldestSilent(open.keys(), socket);
  });

  // Every request goes through `admit` first; the app's listeners (Fastify's) get it from there.
  const listeners = server.listeners('request') as RequestListener[];
  server.removeAllListeners('request');
  const pass = (request: IncomingMessage, response: ServerResponse) => {
    for (const listener of listeners) listener.call(server, request, response);
  };
  const start = (connection: Connection, request: IncomingMessage, response: ServerResponse) => {
    connection.current = [request, response];
    if (!handOver(request.socket, response)) return;
    const next = () => {
      connection.current = undefined;
      const following = connection.waiting.shift();
      if (connection.held && !connection.full && connection.waiting.length <= PIPELINE_HOLD / 2) {
        connection.held = false;
        request.socket.resume();
      }
      if (following) start(connection, ...following);
      else if (connection.then !== undefined && !request.socket.destroyed) connection.then();
    };
    // A response closes once the whole answer is in the kernel's hands, or when it never will be:
    // one listener serves both.
    response.once('close', next);
    pass(request, response);
  };
  server.on('request', function admit(request: IncomingMessage, response: ServerResponse) {
    const socket = request.socket;
    // The rest of a read that follows a request that closed its connection.
    if (socket.destroyed) return;
    const connection = open.get(socket);
    if (!connection) return void (handOver(socket, response) && pass(request, response));
    if (connection.current === undefined) return start(connection, request, response);
    if (connection.full) return;
    if (connection.waiting.length >= PIPELINE_LIMIT) return refusePast(connection, socket);
    connection.waiting.push([request, response]);
    if (connection.waiting.length >= PIPELINE_HOLD && !connection.held) {
      connection.held = true;
      socket.pause();
    }
  });

  if (stallTimeoutMs === undefined) return;
  const check = () => {
    const now = performance.now();
    for (const [socket, connection] of open) {
      if (connection.ending) {
        forget(socket);
        reset(socket);
        continue;
      }
      const seen = progressOf(socket);
      if (seen !== connection.seen || !waitsOnClient(socket, connection)) {
        connection.seen = seen;
        connection.since = now;
      } else if (now - connection.since >= stallTimeoutMs) {
        if (socket.writableLength > 0) {
          close(socket, 'slow_reader');
        } else if (connection.current?.[1].headersSent) {
          close(socket, 'no_progress');
        } else {
          // A body that stopped arriving: the 408 a request timeout would send, then the
          // connection is reset once it is flushed (or at the next check).
          connection.ending = true;
          answerClientError(stalledBody, socket, undefined, reset);
          onClose('no_progress');
        }
      }
    }
  };
  let timer: NodeJS.Timeout | undefined;
  server.on('listening', () => {
    clearInterval(timer);
    timer = setInterval(check, Math.min(1000, stallTimeoutMs)).unref();
  });
  server.on('close', () => clearInterval(timer));
}
