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

/**
 * Shares the connection slots, and bounds what one connection may hold (docs/hardening.md#connections).
 * The decisions are the slot policy's (src/http/slot-policy.ts); this applies them:
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
export function capConnections(
  server: Server,
  { max, perAddress, trusted, stallTimeoutMs, onClose = () => {}, onReport }: ConnectionCaps,
  handler: RequestListener,
): RequestListener {
  const report = reporter(onClose, onReport);
  const table = new SlotTable<Connection>({ max, spare: spareSlots(max), perAddress });
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
  let proxied = 0;
  const now = () => performance.now();

  const forget = (connection: Connection) => {
    connection.pipelined.length = 0;
    if (!table.remove(connection)) return;
    if (connection.releasing && connection.closedFor === undefined) report('busy_evicted', shown(connection.group));
  };
  const close = (connection: Connection, reason: CloseReason) => {
    // One already counted (its depth) is not counted again when it stalls.
    const counted = connection.closedFor !== undefined;
    connection.closedFor ??= reason;
    forget(connection);
    // Silent and idle ones owe their client nothing: a FIN, so that an answer it has not read yet still reaches it.
    if (reason === 'silent_evicted' || reason === 'idle_evicted') connection.socket.destroy();
    else reset(connection.socket);
    if (!counted) report(reason, shown(connection.group));
  };

  // Gives up what is owed, judged after a poll of the event loop (makeRoomSoon) from the byte
  // counts of the looks before it: a request that was in the kernel's buffer at a look has been
  // read by then, and counts. Those giving up their slot with no answer left to make are closed.
  const makeRoom = () => {
    const at = now();
    for (const connection of table.connections()) {
      refresh(connection);
      // Giving up its slot between two requests, and none came: it owes its client nothing more.
      // (One whose last answer said `Connection: close` is being closed by node:http already.)
      if (isDoneLeaving(connection, at) && connection.closedFor === undefined && !connection.socket.writableEnded) {
        close(connection, 'idle_evicted');
      }
    }
    for (const { record, hold } of table.chooseToGiveUp(at)) {
      if (hold === 'busy') closeAfterAdmitted(record);
      else close(record, hold === 'silent' ? 'silent_evicted' : 'idle_evicted');
    }
  };
  let roomPending = false;
  const makeRoomSoon = () => {
    if (roomPending) return;
    roomPending = true;
    setImmediate(() => {
      roomPending = false;
      makeRoom();
    });
  };
  // The hard cap: the group's silent connection gives way, judged again after this turn's reads.
  const closeSilentSoon = (group: string) =>
    setImmediate(() => {
      const at = now();
      for (const connection of table.membersOf(group)) {
        if (connection.leaving) continue;
        refresh(connection);
        if (holdOf(connection, at) === 'silent') return close(connection, 'silent_evicted');
      }
    });

  server.on('connection', (socket: Socket) => {
    const address = socket.remoteAddress;
    if (address === undefined) return;
    // A trusted proxy's connections each count as a group of their own.
    const group = isProxy(address) ? `${address}#${++proxied}` : addressGroup(address);
    const at = now();
    const pressed = table.open - table.leaving >= max || perAddress !== undefined;
    if (pressed) {
      for (const connection of table.membersOf(group)) refresh(connection);
      const admission = decideAdmission(table.admissionFacts(group, at));
      if (!admission.admit) {
        socket.destroy();
        return report(admission.reason, shown(group));
      }
      if (admission.closeSilent) closeSilentSoon(group);
    }
    const connection: Connection = {
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
    table.add(connection);
    track(socket, connection);
    socket.once('close', () => forget(connection));
    if (table.owed() > 0) makeRoomSoon();
  });

  const tooDeep = (connection: Connection) => {
    table.markLeaving(connection);
    if (connection.closedFor !== undefined) return;
    connection.closedFor = 'pipeline_depth';
    report('pipeline_depth', shown(connection.group));
  };

  // The one sweep: the look at what each connection read (for silent and idle), the stalls, and
  // room made after the poll that follows it.
  const sweep = () => {
    const at = now();
    for (const connection of table.connections()) {
      const read = connection.socket.bytesRead;
      if (read !== connection.readAtLook) {
        connection.readAtLook = read;
        connection.changedAt = at;
      }
      if (stallTimeoutMs !== undefined) checkStall(connection, at, stallTimeoutMs);
    }
    if (table.owed() > 0 || table.leaving > 0) makeRoomSoon();
  };
  const checkStall = (connection: Connection, at: number, stallMs: number) => {
    // The 408 had a check's time to be flushed (it resets the connection itself once it is).
    if (connection.ending) {
      if (at - connection.since < Math.min(1000, stallMs)) return;
      forget(connection);
      return reset(connection.socket);
    }
    const stall = stallOf(connection, at, stallMs);
    if (stall === undefined) return;
    if (stall !== 'body') return close(connection, stall);
    // A body that stopped arriving: the 408 a request timeout would send, then the connection is
    // reset once it is flushed (or at the next check).
    connection.ending = true;
    connection.since = at;
    connection.closedFor = 'no_progress';
    table.markLeaving(connection);
    answerClientError(stalledBody, connection.socket, undefined, reset);
    report('no_progress', shown(connection.group));
  };
  let timer: NodeJS.Timeout | undefined;
  server.on('listening', () => {
    clearInterval(timer);
    timer = setInterval(sweep, QUIET_MS / 2).unref();
  });
  server.on('close', () => clearInterval(timer));

  return gateRequests(handler, tooDeep);
}
