import { createServer, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { FastifyServerFactory } from 'fastify';
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
  /** With no slot free, its group held the most, and it had sent nothing for QUIET_MS. */
  | 'silent_evicted'
  /** With no slot free, its group held the most, and it was idle between two requests. */
  | 'idle_evicted'
  /** With no slot free, its group held the most: closed after the answer in progress (`Connection: close`). */
  | 'busy_evicted'
  /** Refused as it opened: with no slot free its group held the most and had nothing to give up, or it was at PETSTORE_MAX_CONNECTIONS_PER_ADDRESS. */
  | 'address_full'
  /** Refused as it opened: every slot, the spare ones included, was taken. */
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

/**
 * How long a connection must have sent nothing, or nothing more while no answer was in
 * progress, to count as silent or idle when a slot is needed; also how often that is looked at.
 * A request already in the kernel's buffer is read within one turn of the event loop: a
 * connection counts only once its byte count was the same at a look taken a turn earlier.
 */
export const QUIET_MS = 250;

/** Connections let in past `max` while the group holding the most gives one up (docs/hardening.md#connections). */
export const spareSlots = (max: number) => Math.max(4, Math.floor(max / 32));

export interface ConnectionCaps {
  /** Slots shared by all clients (PETSTORE_MAX_CONNECTIONS). */
  max: number;
  /** A hard cap per address group (PETSTORE_MAX_CONNECTIONS_PER_ADDRESS); undefined: none, the default. */
  perAddress: number | undefined;
  /** Proxies (PETSTORE_TRUST_PROXY), which carry many clients: each of their connections counts as a group of its own. */
  trusted: string[];
  /** Longest wait on a client that makes no progress (PETSTORE_STALL_TIMEOUT_MS); undefined: no such limit. */
  stallTimeoutMs?: number;
  /** Told each time a connection is closed here or refused (for /metrics). */
  onClose?: (reason: CloseReason) => void;
  /** Told at most once a second per reason: how many were closed since its last line, and the group of the last one. */
  onReport?: (report: { reason: CloseReason; group: string; closed: number }) => void;
}

/**
 * Fastify's `serverFactory`: the node:http server, every one of its options set here, with the
 * connection limits of capConnections. Its one `'request'` listener is Fastify's, behind the
 * pipelining gate.
 */
export function serveHttp(options: ServerOptions, caps: ConnectionCaps): FastifyServerFactory {
  return (handler) => {
    const server = createServer(options);
    server.on('request', capConnections(server, caps, handler as RequestListener));
    return server;
  };
}

type RequestListener = (request: IncomingMessage, response: ServerResponse) => void;

/** The answer a connection is on: node:http's ServerResponse holds the socket until the answer is in the kernel's hands. */
const kAnswering = Symbol('petstore.answering');
/** Set on a connection that gives up its slot: its next answer says `Connection: close`. */
const kRelease = Symbol('petstore.release');
type Tracked = Socket & { [kAnswering]?: ServerResponse; [kRelease]?: boolean };

/** Hands `request` to `handler` as the answer `socket` is on, closing the connection after it when it gives up its slot. */
function dispatch(socket: Tracked, request: IncomingMessage, response: ServerResponse, handler: RequestListener) {
  socket[kAnswering] = response;
  if (socket[kRelease]) response.setHeader('connection', 'close');
  handler(request, response);
}

/** The answer in progress on `socket`, if any: node:http takes the socket back (`response.socket` null) once it is flushed. */
function answeringOn(socket: Socket): ServerResponse | undefined {
  const response = (socket as Tracked)[kAnswering];
  return response !== undefined && response.socket === socket ? response : undefined;
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

interface Waiting {
  request: IncomingMessage;
  response: ServerResponse;
  /** Left unanswered by the app: its request was cut short by a parser error (afterAnswers). */
  dropped: boolean;
}

interface Connection {
  /** Its address group (addressGroup), or undefined for a trusted proxy's, which counts alone. */
  group: string | undefined;
  openedAt: number;
  /** Requests received behind the answer in progress, oldest first (pipelined). */
  waiting: Waiting[];
  /** True while its reading is stopped for too many waiting requests. */
  held: boolean;
  /** True once more than PIPELINE_LIMIT waited: its reading stopped for good, it closes after the answers it admitted. */
  full: boolean;
  /** Bytes read at the last look, -1 before the first, and when a look last found it changed. */
  readAtLook: number;
  changedAt: number;
  /** Giving up its slot after the answer in progress. */
  releasing: boolean;
  /** Closed here already, for this reason (counted). */
  closedFor: CloseReason | undefined;
  /** Bytes read plus bytes the kernel took, at the last stall check, and when it last changed or the connection last waited on nothing from its client. */
  seen: number;
  since: number;
  /** Answered 408 for a stalled body: destroyed at the next check if the answer could not be flushed. */
  ending: boolean;
  /** What afterAnswers runs once the answers it waits for are handed over. */
  then: (() => void) | undefined;
}

/**
 * Closes `socket` with a reset (RST) rather than a FIN, for the connections the service closes
 * because they stalled (docs/hardening.md#connections): the kernel then drops what it still
 * holds of their answers at once, where after a FIN it keeps it, for a client that may never
 * read it, until it gives up.
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
  const current = answeringOn(socket);
  if (connection === undefined || current === undefined) return then();
  if (connection.then !== undefined) return;
  const whole = connection.waiting.filter((entry) => {
    entry.dropped = !entry.request.complete;
    return !entry.dropped;
  });
  if (current.req.complete || whole.length > 0) {
    connection.then = then;
  } else if (current.headersSent) {
    connection.then = () => socket.destroy();
  } else {
    return then();
  }
  // A response closes once the whole answer is in the kernel's hands, or when it never will be.
  (whole.at(-1)?.response ?? current).once('close', () => {
    if (!socket.destroyed) connection.then?.();
  });
}

/** Bytes the connection read, plus those of its answers the kernel took (what is still queued in the process is left out). */
const progressOf = (socket: Socket) => socket.bytesRead + (socket.bytesWritten ?? 0) - socket.writableLength;

/** True while the connection can go on only if its client does something: read its answers, or send the rest of a body. */
const waitsOnClient = (socket: Socket) => {
  if (socket.writableLength > 0) return true;
  const current = answeringOn(socket);
  return current !== undefined && !current.req.complete;
};

const stalledBody = Object.assign(new Error('Request body stalled'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });

/**
 * Counts each close in `onClose`, and gives `onReport` at most one line a second per reason:
 * the closes since the last line, and the group of the latest. Closes within the second after
 * a line are told in one line when it is over.
 */
function reporter(onClose: (reason: CloseReason) => void, onReport: ConnectionCaps['onReport']) {
  const lines = new Map<CloseReason, { at: number; closed: number; group: string; timer?: NodeJS.Timeout }>();
  const flush = (reason: CloseReason) => {
    const line = lines.get(reason)!;
    line.timer = undefined;
    if (line.closed === 0) return;
    onReport!({ reason, group: line.group, closed: line.closed });
    line.closed = 0;
    line.at = performance.now();
  };
  return (reason: CloseReason, group: string) => {
    onClose(reason);
    if (onReport === undefined) return;
    let line = lines.get(reason);
    if (line === undefined) lines.set(reason, (line = { at: -Infinity, closed: 0, group }));
    line.closed++;
    line.group = group;
    const wait = line.at + 1000 - performance.now();
    if (wait <= 0) flush(reason);
    else line.timer ??= setTimeout(flush, wait, reason).unref();
  };
}

/**
 * Shares the connection slots, and bounds what one connection may hold (docs/hardening.md#connections):
 *
 * - While fewer than `max` connections are open, every one is let in, whatever its address.
 *   Past `max` (up to `spareSlots(max)` more, then node:http refuses as it opens), the address
 *   group holding the most slots gives one up: a connection that has sent nothing for QUIET_MS,
 *   else one idle between requests (both closed at once), else one busy, closed after the answer
 *   in progress (or its next) with `Connection: close`; never a request cut off. A new
 *   connection whose own group holds more than an even share of the slots, with no silent or
 *   idle one to give up at once, is refused as it opens. A trusted proxy's connections each
 *   count as a group of one.
 * - `perAddress`, when set, is a hard cap: past it, the group's own silent connection makes
 *   room, or else the new one is refused.
 * - Pipelining: the returned request listener passes a request on to `handler` at once when
 *   its answer is the connection's next (node:http has given its response the socket: one
 *   property read). One received behind an answer in progress waits for node:http to hand its
 *   response the socket; with PIPELINE_HOLD waiting the connection's reading stops until half
 *   are let through, and past PIPELINE_LIMIT it stops for good: the connection is closed once
 *   those admitted are answered. So one connection never holds more than one answer in the
 *   process.
 * - A connection that waits on its client (answers unread, a body not arriving) and makes no
 *   progress for `stallTimeoutMs` is reset, checked every second at most.
 *
 * Only open connections are remembered.
 */
export function capConnections(
  server: Server,
  { max, perAddress, trusted, stallTimeoutMs, onClose = () => {}, onReport }: ConnectionCaps,
  handler: RequestListener,
): RequestListener {
  const report = reporter(onClose, onReport);
  server.maxConnections = max + spareSlots(max);
  server.on('drop', (data?: { remoteAddress?: string }) =>
    report('server_full', data?.remoteAddress ? addressGroup(data.remoteAddress) : 'unknown'),
  );
  // An idle keep-alive connection is closed after PETSTORE_KEEP_ALIVE_TIMEOUT_MS (node:http's
  // socket timeout, which this listener takes over) with a reset too: answers the client never
  // read may still fill the kernel's buffers, and a reset is the same "closed" to a pool.
  server.on('timeout', reset);
  const proxies = blockListOf(trusted);
  const isProxy = (address: string) =>
    trusted.length > 0 && proxies.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
  // Open connections, oldest first, and those of each address group.
  const open = new Map<Socket, Connection>();
  const byGroup = new Map<string, Set<Socket>>();
  let releasing = 0;
  const forget = (socket: Socket) => {
    const connection = open.get(socket);
    if (!connection) return;
    open.delete(socket);
    records.delete(socket);
    connection.waiting.length = 0;
    if (connection.group === undefined) trustedOpen--;
    else {
      const mine = byGroup.get(connection.group);
      mine?.delete(socket);
      if (mine?.size === 0) byGroup.delete(connection.group);
    }
    if (connection.releasing) {
      releasing--;
      if (connection.closedFor === undefined) report('busy_evicted', groupName(socket, connection));
    }
  };
  const groupName = (socket: Socket, connection: Connection) => connection.group ?? socket.remoteAddress ?? 'unknown';
  const close = (socket: Socket, reason: CloseReason) => {
    const connection = open.get(socket);
    // One already counted for its depth is not counted again when it stalls.
    const counted = connection?.full === true;
    if (connection) connection.closedFor = reason;
    const group = connection ? groupName(socket, connection) : 'unknown';
    forget(socket);
    // Silent and idle ones owe their client nothing: a FIN, so that an answer it has not read yet still reaches it.
    if (reason === 'silent_evicted' || reason === 'idle_evicted') socket.destroy();
    else reset(socket);
    if (!counted) report(reason, group);
  };

  // What a connection can give up, judged after a poll of the event loop (setImmediate) from the
  // byte counts of the looks before it: a request that was in the kernel's buffer at a look has
  // been read by then, and counts.
  const now = () => performance.now();
  const isSilent = (socket: Socket, connection: Connection, at: number) =>
    connection.readAtLook === 0 && socket.bytesRead === 0 && at - connection.openedAt >= QUIET_MS;
  // Idle: answered before, no answer in progress, waiting or still queued for the client, nothing
  // read for a look at least.
  const isIdle = (socket: Socket, connection: Connection, at = Infinity) =>
    (socket as Tracked)[kAnswering] !== undefined &&
    answeringOn(socket) === undefined &&
    socket.writableLength === 0 &&
    connection.waiting.length === 0 &&
    (at === Infinity || (socket.bytesRead === connection.readAtLook && at - connection.changedAt >= QUIET_MS / 2));
  type Kind = 'silent' | 'idle' | 'busy';
  // Silent, else idle, else busy: the answer in progress first (one with requests waiting
  // behind it would leave them unanswered: the last choice), then the next answer.
  const victimIn = (sockets: Iterable<Socket>): [Socket, Kind] | undefined => {
    const at = now();
    let idle: Socket | undefined;
    let busy: Socket | undefined;
    let rank = Infinity;
    for (const socket of sockets) {
      const connection = open.get(socket);
      if (!connection || connection.releasing || connection.full || connection.ending) continue;
      if (isSilent(socket, connection, at)) return [socket, 'silent'];
      if (idle === undefined && isIdle(socket, connection, at)) idle = socket;
      if (socket.bytesRead === 0) continue;
      const mine = answeringOn(socket) === undefined ? PIPELINE_LIMIT + 1 : connection.waiting.length;
      if (mine < rank) [busy, rank] = [socket, mine];
    }
    if (idle) return [idle, 'idle'];
    if (busy) return [busy, 'busy'];
    return undefined;
  };
  // A busy connection gives up its slot after the answer in progress, or its next one: node:http
  // closes the connection after an answer that says `Connection: close` (RFC 9112 section 9.6).
  const release = (socket: Socket, connection: Connection) => {
    connection.releasing = true;
    releasing++;
    (socket as Tracked)[kRelease] = true;
    const response = answeringOn(socket);
    if (response === undefined) return;
    if (!response.headersSent) response.setHeader('connection', 'close');
    else response.once('finish', () => socket.destroySoon());
  };
  const giveUp = (socket: Socket, kind: Kind) => {
    const connection = open.get(socket)!;
    if (kind === 'busy') release(socket, connection);
    else close(socket, kind === 'silent' ? 'silent_evicted' : 'idle_evicted');
  };
  // Groups, the most slots first; a trusted proxy's connections last, each a group of one.
  const groupsBySize = (): Iterable<Socket>[] => {
    const groups: Iterable<Socket>[] = [...byGroup.values()].sort((a, b) => b.size - a.size);
    for (const [socket, connection] of open) if (connection.group === undefined) groups.push([socket]);
    return groups;
  };
  // Frees slots until at most `max` are held, counting those already being given up; closes
  // those giving up theirs that have no answer left to make.
  const makeRoom = () => {
    const at = now();
    if (releasing > 0) {
      for (const [socket, connection] of open) {
        if (connection.releasing && isIdle(socket, connection, at)) close(socket, 'idle_evicted');
      }
    }
    let owed = open.size - max - releasing;
    if (owed <= 0) return;
    for (const group of groupsBySize()) {
      let victim;
      while (owed > 0 && (victim = victimIn(group))) {
        giveUp(...victim);
        owed--;
      }
      if (owed <= 0) return;
    }
  };
  let roomPending = false;
  // After this turn's reads: a request that was in the kernel's buffer is counted by then.
  const makeRoomSoon = () => {
    if (roomPending) return;
    roomPending = true;
    setImmediate(() => {
      roomPending = false;
      makeRoom();
    });
  };
  // Whether one of `sockets` other than `spare` looked silent or idle at the last look: it could
  // be given up at once (makeRoom judges again after this turn's reads).
  const canGiveUpAtOnce = (sockets: Iterable<Socket>, spare: Socket) => {
    const at = now();
    for (const socket of sockets) {
      const connection = open.get(socket);
      if (socket === spare || !connection || connection.releasing) continue;
      if (isSilent(socket, connection, at) || isIdle(socket, connection, at)) return true;
    }
    return false;
  };
  let trustedOpen = 0;
  // More than an even share of the slots among the groups that hold one.
  const overShare = (size: number) => size * (byGroup.size + trustedOpen) > max;
  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    const group = isProxy(address) ? undefined : addressGroup(address);
    let mine: Set<Socket> | undefined;
    if (group !== undefined) {
      mine = byGroup.get(group);
      if (perAddress !== undefined && (mine?.size ?? 0) >= perAddress) {
        const silent = [...mine!].find((other) => {
          const connection = open.get(other)!;
          return !connection.releasing && isSilent(other, connection, now());
        });
        if (silent === undefined) {
          socket.destroy();
          return report('address_full', group);
        }
        // Judged again once this turn's reads are done.
        setImmediate(() => {
          const connection = open.get(silent);
          if (connection && isSilent(silent, connection, now())) close(silent, 'silent_evicted');
        });
      }
      if (!mine) byGroup.set(group, (mine = new Set()));
      mine.add(socket);
    } else {
      trustedOpen++;
    }
    const connection: Connection = {
      group,
      openedAt: now(),
      waiting: [],
      held: false,
      full: false,
      readAtLook: -1,
      changedAt: 0,
      releasing: false,
      closedFor: undefined,
      seen: 0,
      since: 0,
      ending: false,
      then: undefined,
    };
    (socket as Tracked)[kAnswering] = undefined;
    (socket as Tracked)[kRelease] = false;
    open.set(socket, connection);
    records.set(socket, connection);
    socket.once('close', () => forget(socket));
    // node:http resumes reading when an answer is done; a held connection stops again at once.
    socket.on('resume', () => {
      if (connection.held) socket.pause();
    });
    if (open.size - releasing <= max) return;
    // No slot free. A group holding more than an even share may take one only in place of one
    // of its own that it gives up at once: its busy ones would free theirs later, and the spare
    // slots are for the other groups meanwhile.
    if (mine !== undefined && overShare(mine.size) && !canGiveUpAtOnce(mine, socket)) {
      close(socket, 'address_full');
      return;
    }
    makeRoomSoon();
  });

  // Past the limit, reading stops for good and the requests admitted are answered, the last with
  // `Connection: close`, after which node:http closes the connection (RFC 9112 section 9.6). The
  // requests read past the limit never reach the app: the client retries them on a new
  // connection (RFC 9112 section 9.3.2). One that does not read its answers is reset when it
  // stalls, as any other.
  const refusePast = (connection: Connection, socket: Socket) => {
    connection.full = true;
    connection.held = true;
    socket.pause();
    connection.waiting.at(-1)?.response.setHeader('connection', 'close');
    report('pipeline_depth', groupName(socket, connection));
  };
  // A CONNECT (routeEveryRequest) is answered once the answers before it are done.
  const connectInTurn = (socket: Socket, request: IncomingMessage, response: ServerResponse) => {
    const start = () => {
      if (handOver(socket, response)) dispatch(socket, request, response, handler);
    };
    const ahead = records.get(socket)?.waiting.at(-1)?.response ?? answeringOn(socket);
    if (ahead === undefined) start();
    else ahead.once('close', start);
  };
  // A request received behind an answer in progress: node:http hands its response the socket
  // (the 'socket' event) once the answers before it are in the kernel's hands.
  const wait = (request: IncomingMessage, response: ServerResponse) => {
    const socket = request.socket;
    // The rest of a read that follows a request that closed its connection.
    if (socket.destroyed) return;
    if (request.method === 'CONNECT') return connectInTurn(socket, request, response);
    const connection = records.get(socket);
    if (connection === undefined) {
      response.once('socket', () => dispatch(socket, request, response, handler));
      return;
    }
    if (connection.full) return;
    if (connection.waiting.length >= PIPELINE_LIMIT) return refusePast(connection, socket);
    const entry: Waiting = { request, response, dropped: false };
    connection.waiting.push(entry);
    if (connection.waiting.length >= PIPELINE_HOLD && !connection.held) {
      connection.held = true;
      socket.pause();
    }
    response.once('socket', () => {
      const at = connection.waiting.indexOf(entry);
      if (at >= 0) connection.waiting.splice(at, 1);
      if (connection.held && !connection.full && connection.waiting.length <= PIPELINE_HOLD / 2) {
        connection.held = false;
        socket.resume();
      }
      if (!entry.dropped) dispatch(socket, request, response, handler);
    });
  };

  let timers: NodeJS.Timeout[] = [];
  const every = (ms: number, run: () => void) => timers.push(setInterval(run, ms).unref());
  server.on('listening', () => {
    timers.forEach(clearInterval);
    timers = [];
    // The look at what each connection read, for silent and idle; room is made after the poll
    // that follows it.
    every(QUIET_MS / 2, () => {
      const at = now();
      for (const [socket, connection] of open) {
        if (socket.bytesRead === connection.readAtLook) continue;
        connection.readAtLook = socket.bytesRead;
        connection.changedAt = at;
      }
      makeRoomSoon();
    });
    if (stallTimeoutMs !== undefined) every(Math.min(1000, stallTimeoutMs), () => checkStalls(stallTimeoutMs));
  });
  server.on('close', () => timers.forEach(clearInterval));

  const checkStalls = (stallMs: number) => {
    const at = now();
    for (const [socket, connection] of open) {
      if (connection.ending) {
        forget(socket);
        reset(socket);
        continue;
      }
      const seen = progressOf(socket);
      if (seen !== connection.seen || !waitsOnClient(socket)) {
        connection.seen = seen;
        connection.since = at;
      } else if (at - connection.since >= stallMs) {
        if (socket.writableLength > 0) {
          close(socket, 'slow_reader');
        } else if (answeringOn(socket)?.headersSent) {
          close(socket, 'no_progress');
        } else {
          // A body that stopped arriving: the 408 a request timeout would send, then the
          // connection is reset once it is flushed (or at the next check).
          connection.ending = true;
          connection.closedFor = 'no_progress';
          answerClientError(stalledBody, socket, undefined, reset);
          report('no_progress', groupName(socket, connection));
        }
      }
    }
  };

  return function gate(request: IncomingMessage, response: ServerResponse) {
    const socket = response.socket;
    // Its answer is the connection's next: node:http gave it the socket.
    if (socket !== null) return dispatch(socket, request, response, handler);
    wait(request, response);
  };
}
