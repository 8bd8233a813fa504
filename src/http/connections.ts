import { createServer, type Server, type ServerOptions } from 'node:http';
import { isIP, type Socket } from 'node:net';
import type { FastifyServerFactory } from 'fastify';
import { addressGroup, blockListOf } from './addresses.js';
import { answerClientError } from './client-errors.js';
import { answeringOn, closeAfterAdmitted, gateRequests, track, type RequestListener } from './pipelining.js';
import {
  decideAdmission,
  holdOf,
  isDoneLeaving,
  QUIET_MS,
  SlotTable,
  spareSlots,
  type CloseReason,
  type SlotRecord,
} from './slot-policy.js';
import { reset, stallOf, stalledBody, type StallWatch } from './stalls.js';

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
 * pipelining gate (src/http/pipelining.ts).
 */
export function serveHttp(options: ServerOptions, caps: ConnectionCaps): FastifyServerFactory {
  return (handler) => {
    const server = createServer(options);
    server.on('request', capConnections(server, caps, handler as RequestListener));
    return server;
  };
}

/** One open connection: all the service keeps of it, for the slot policy, the pipelining gate and the stall rule. */
interface Connection extends SlotRecord, StallWatch {
  /** Closed here already, for this reason (counted). */
  closedFor: CloseReason | undefined;
}

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

/** The group as the log line names it: a trusted proxy's connections (`<address>#<n>`, a group each) by the proxy's address. */
const shown = (group: string) => group.split('#', 1)[0]!;

/** Brings the facts the slot policy reads up to date from the socket. */
function refresh(connection: Connection): void {
  const { socket } = connection;
  connection.read = socket.bytesRead;
  connection.answering = answeringOn(connection) !== undefined;
  connection.queued = socket.writableLength;
  connection.waiting = connection.pipelined.length;
}

/** A new connection's record, holding nothing yet. */
function newConnection(socket: Socket, group: string, at: number): Connection {
  return {
    socket,
    group,
    openedAt: at,
    read: 0,
    readAtLook: -1,
    changedAt: at,
    readWhole: 0,
    answering: false,
    waiting: 0,
    queued: 0,
    leaving: false,
    response: undefined,
    pipelined: [],
    held: false,
    full: false,
    releasing: false,
    closeNext: false,
    then: undefined,
    seen: 0,
    since: at,
    ending: false,
    closedFor: undefined,
  };
}

const now = () => performance.now();

/**
 * The open connections of one server, and what the service does to them: it lets them in or
 * refuses them as they open, gives slots up, and closes those that stall. The decisions are the
 * slot policy's (src/http/slot-policy.ts) and the stall rule's (src/http/stalls.ts).
 */
class Connections {
  private readonly table: SlotTable<Connection>;
  private readonly report: (reason: CloseReason, group: string) => void;
  private readonly isProxy: (address: string) => boolean;
  private proxied = 0;
  private roomPending = false;

  constructor(private readonly caps: ConnectionCaps) {
    this.table = new SlotTable({ max: caps.max, spare: spareSlots(caps.max), perAddress: caps.perAddress });
    this.report = reporter(caps.onClose ?? (() => {}), caps.onReport);
    const proxies = blockListOf(caps.trusted);
    this.isProxy = (address) =>
      caps.trusted.length > 0 && proxies.check(address, isIP(address) === 6 ? 'ipv6' : 'ipv4');
  }

  /** A connection node:http accepted: let in (tracked until it closes), or refused at once. */
  open(socket: Socket): void {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    // A trusted proxy's connections each count as a group of their own.
    const group = this.isProxy(address) ? `${address}#${++this.proxied}` : addressGroup(address);
    const at = now();
    const { table, caps } = this;
    if (table.open - table.leaving >= caps.max || caps.perAddress !== undefined) {
      for (const connection of table.membersOf(group)) refresh(connection);
      const admission = decideAdmission(table.admissionFacts(group, at));
      if (!admission.admit) {
        socket.destroy();
        return this.report(admission.reason, shown(group));
      }
      if (admission.closeSilent) setImmediate(() => this.closeSilent(group));
    }
    const connection = newConnection(socket, group, at);
    table.add(connection);
    track(socket, connection);
    socket.once('close', () => this.forget(connection));
    if (table.owed() > 0) this.makeRoomSoon();
  }

  /** node:http refused one as it opened: every slot, the spare ones too, was taken. */
  dropped(remoteAddress: string | undefined): void {
    this.report('server_full', remoteAddress ? addressGroup(remoteAddress) : 'unknown');
  }

  /** One that pipelined past PIPELINE_LIMIT: it closes after the answers admitted. */
  tooDeep(connection: Connection): void {
    this.table.markLeaving(connection);
    if (connection.closedFor !== undefined) return;
    connection.closedFor = 'pipeline_depth';
    this.report('pipeline_depth', shown(connection.group));
  }

  /**
   * The one sweep: the look at what each connection read (silent, idle), its stall checked,
   * and room made after the poll that follows, when slots are owed or being given up.
   */
  sweep(): void {
    const at = now();
    const { stallTimeoutMs } = this.caps;
    for (const connection of this.table.connections()) {
      const read = connection.socket.bytesRead;
      if (read !== connection.readAtLook) {
        connection.readAtLook = read;
        connection.changedAt = at;
      }
      if (stallTimeoutMs !== undefined) this.checkStall(connection, at, stallTimeoutMs);
    }
    if (this.table.owed() > 0 || this.table.leaving > 0) this.makeRoomSoon();
  }

  private forget(connection: Connection): void {
    connection.pipelined.length = 0;
    if (!this.table.remove(connection)) return;
    if (connection.releasing && connection.closedFor === undefined) {
      this.report('busy_evicted', shown(connection.group));
    }
  }

  private close(connection: Connection, reason: CloseReason): void {
    // One already counted (its depth) is not counted again when it stalls.
    const counted = connection.closedFor !== undefined;
    connection.closedFor ??= reason;
    this.forget(connection);
    // Silent and idle ones owe their client nothing: a FIN, so that an answer it has not read yet still reaches it.
    if (reason === 'silent_evicted' || reason === 'idle_evicted') connection.socket.destroy();
    else reset(connection.socket);
    if (!counted) this.report(reason, shown(connection.group));
  }

  // After this turn's reads: a request that was in the kernel's buffer at a look is counted by then.
  private makeRoomSoon(): void {
    if (this.roomPending) return;
    this.roomPending = true;
    setImmediate(() => {
      this.roomPending = false;
      this.makeRoom();
    });
  }

  /** Gives up what is owed; closes those giving up their slot between two requests that stayed idle. */
  private makeRoom(): void {
    const at = now();
    for (const connection of this.table.connections()) {
      refresh(connection);
      // (One whose last answer said `Connection: close` is being closed by node:http already.)
      if (isDoneLeaving(connection, at) && connection.closedFor === undefined && !connection.socket.writableEnded) {
        this.close(connection, 'idle_evicted');
      }
    }
    for (const { record, hold } of this.table.chooseToGiveUp(at)) {
      if (hold === 'busy') closeAfterAdmitted(record);
      else this.close(record, hold === 'silent' ? 'silent_evicted' : 'idle_evicted');
    }
  }

  /** The hard cap: the group's silent connection gives way to a new one, judged again after this turn's reads. */
  private closeSilent(group: string): void {
    const at = now();
    for (const connection of this.table.membersOf(group)) {
      if (connection.leaving) continue;
      refresh(connection);
      if (holdOf(connection, at) === 'silent') return this.close(connection, 'silent_evicted');
    }
  }

  private checkStall(connection: Connection, at: number, stallMs: number): void {
    // The 408 had a check's time to be flushed (it resets the connection itself once it is).
    if (connection.ending) {
      if (at - connection.since < Math.min(1000, stallMs)) return;
      this.forget(connection);
      return reset(connection.socket);
    }
    const stall = stallOf(connection, at, stallMs);
    if (stall === undefined) return;
    if (stall !== 'body') return this.close(connection, stall);
    // A body that stopped arriving: the 408 a request timeout would send, then the connection is
    // reset once it is flushed (or at the next check).
    connection.ending = true;
    connection.since = at;
    connection.closedFor = 'no_progress';
    this.table.markLeaving(connection);
    answerClientError(stalledBody, connection.socket, undefined, reset);
    this.report('no_progress', shown(connection.group));
  }
}

/**
 * Shares the connection slots, and bounds what one connection may hold (docs/hardening.md#connections):
 *
 * - A new connection is admitted or refused as it opens (decideAdmission); past `max` it takes
 *   a spare slot (up to `spareSlots(max)`, then node:http refuses as it opens), and after this
 *   turn's reads the groups holding the most give up what is owed (SlotTable.chooseToGiveUp):
 *   a silent or idle connection is closed at once (FIN), a busy one closes after the answers
 *   to the requests it has received (`Connection: close`), never a request cut off.
 * - The pipelining gate (src/http/pipelining.ts) lets one answer at a time be made per
 *   connection, and closes one that pipelines too deep.
 * - A connection that waits on its client (answers unread, a body not arriving) and makes no
 *   progress for `stallTimeoutMs` is reset (src/http/stalls.ts).
 *
 * One sweep every QUIET_MS / 2 takes each connection's byte count (silent, idle), checks the
 * stalls, and makes room when slots are owed. Only open connections are remembered.
 */
export function capConnections(server: Server, caps: ConnectionCaps, handler: RequestListener): RequestListener {
  const connections = new Connections(caps);
  server.maxConnections = caps.max + spareSlots(caps.max);
  server.on('drop', (data?: { remoteAddress?: string }) => connections.dropped(data?.remoteAddress));
  // An idle keep-alive connection is closed after PETSTORE_KEEP_ALIVE_TIMEOUT_MS (node:http's
  // socket timeout, which this listener takes over) with a reset too: answers the client never
  // read may still fill the kernel's buffers, and a reset is the same "closed" to a pool.
  server.on('timeout', reset);
  server.on('connection', (socket: Socket) => connections.open(socket));
  let timer: NodeJS.Timeout | undefined;
  server.on('listening', () => {
    clearInterval(timer);
    timer = setInterval(() => connections.sweep(), QUIET_MS / 2).unref();
  });
  server.on('close', () => clearInterval(timer));
  return gateRequests<Connection>(handler, (connection) => connections.tooDeep(connection));
}
