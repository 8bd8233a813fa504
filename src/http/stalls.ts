import type { Socket } from 'node:net';
import { answeringOn, type Pipeline } from './pipelining.js';

/**
 * Closes `socket` with a reset (RST) rather than a FIN, for the connections the service closes
 * because they stalled (docs/hardening.md#connections): the kernel then drops what it still
 * holds of their answers at once, where after a FIN it keeps it, for a client that may never
 * read it, until it gives up.
 */
export function reset(socket: Socket): void {
  if (socket.destroyed) return;
  try {
    socket.resetAndDestroy();
  } catch {
    // Not a TCP socket: it has no reset to send.
    socket.destroy();
  }
}

/** What the stall rule keeps of one connection: part of its one record (src/http/connections.ts). */
export interface StallWatch extends Pipeline {
  /** Bytes read plus bytes the kernel took, at the last check, and when that last changed or the connection last waited on nothing from its client. */
  seen: number;
  since: number;
  /** Answered 408 for a stalled body: reset at the next check if the answer could not be flushed. */
  ending: boolean;
}

/**
 * How a connection stalled: its answers not read (`slow_reader`), an answer begun whose request
 * body stopped arriving (`no_progress`), or a body that stopped arriving before any answer
 * (`body`: it gets the 408 a request timeout would send, then is reset).
 */
export type Stall = 'slow_reader' | 'no_progress' | 'body';

/** Bytes the connection read, plus those of its answers the kernel took (what is still queued in the process is left out). */
const progressOf = (socket: Socket) => socket.bytesRead + (socket.bytesWritten ?? 0) - socket.writableLength;

/** True while the connection can go on only if its client does something: read its answers, or send the rest of a body. */
function waitsOnClient(watch: StallWatch): boolean {
  if (watch.socket.writableLength > 0) return true;
  const current = answeringOn(watch);
  return current !== undefined && !current.req.complete;
}

/**
 * Whether the connection has waited on its client without progress for `stallMs` by `now`,
 * and how; one check of the sweep, which notes its progress for the next.
 */
export function stallOf(watch: StallWatch, now: number, stallMs: number): Stall | undefined {
  const seen = progressOf(watch.socket);
  if (seen !== watch.seen || !waitsOnClient(watch)) {
    watch.seen = seen;
    watch.since = now;
    return undefined;
  }
  if (now - watch.since < stallMs) return undefined;
  if (watch.socket.writableLength > 0) return 'slow_reader';
  return answeringOn(watch)?.headersSent ? 'no_progress' : 'body';
}

/** The error node:http's request timeout raises, for the 408 a stalled body gets (client-errors.ts). */
export const stalledBody = Object.assign(new Error('Request body stalled'), { code: 'ERR_HTTP_REQUEST_TIMEOUT' });
