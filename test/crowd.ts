import { connect, type AddressInfo, type Socket } from 'node:net';
import type { TestContext } from 'node:test';
import { startApp, tempSqliteStore } from './helpers.js';

/**
 * Clients that hold connection slots, and newcomers, for the tests of the slot policy on real
 * sockets (test/fair-shares.test.ts, test/crowds.test.ts). Addresses come from 127.0.0.0/8.
 */

/** The app on a real socket, with `env` settings (the store: PETSTORE_TEST_STORE's, SQLite by default). */
export async function listen(t: TestContext, env: Record<string, string> = {}, sqlite = false) {
  // Registered before the app's close, which waits for them: the test's connections are destroyed first.
  const sockets: Socket[] = [];
  t.after(() => sockets.forEach((socket) => socket.destroy()));
  const app = await startApp(t, { env, ...(sqlite ? { store: (await tempSqliteStore(t)).store } : {}) });
  await app.app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.app.server.address() as AddressInfo;
  /** petstore_connections_closed_total, by reason. */
  const closedBy = async () => {
    const metrics = await app.call({ url: '/metrics' });
    const counts: Record<string, number> = {};
    for (const [, reason, value] of metrics.body.matchAll(
      /^petstore_connections_closed_total\{reason="([a-z_]+)"\} ([0-9]+)$/gm,
    )) {
      counts[reason!] = Number(value);
    }
    return counts;
  };
  const openCount = () => new Promise<number>((resolve) => app.app.server.getConnections((_, n) => resolve(n)));
  return { ...app, port, closedBy, openCount, sockets };
}

export const HEALTHZ = 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n';
export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export type Hold = 'silent' | 'idle' | 'busy';

export interface HolderOptions {
  /** idle: the wait before it uses its connection again (none: never); busy: between an answer and its next request (50 ms). */
  againMs?: number;
  /** Requests sent on a connection that was served, then closed before their answer came. */
  cut: { count: number };
  /** When each address was last answered (performance.now()). */
  answeredAt?: Map<string, number>;
}

/**
 * Connections from `address` that hold a slot, until the test ends: `silent` sends nothing;
 * `idle` sends one request, reads its answer, then waits (and with `againMs`, uses it again
 * that often); `busy` sends a request 50 ms after each answer. An idle or busy client stops at
 * an answer that says `Connection: close`, or at the server's FIN, and opens a new connection
 * when it next needs one. Resolves once the first connection is open (silent) or answered.
 */
export function holder(
  t: TestContext,
  sockets: Socket[],
  port: number,
  address: string,
  how: Hold,
  options: HolderOptions,
) {
  let stopped = false;
  t.after(() => (stopped = true));
  const deadline = performance.now() + 30_000;
  const againMs = how === 'busy' ? (options.againMs ?? 50) : options.againMs;
  const goOn = () => againMs !== undefined && !stopped && performance.now() < deadline;
  const start = (): Promise<void> =>
    new Promise((resolve) => {
      const socket = connect({ port, host: '127.0.0.1', localAddress: address });
      sockets.push(socket);
      let sent = 0;
      let answered = 0;
      let last = false;
      const send = () => {
        if (socket.destroyed || last) return;
        sent++;
        socket.write(HEALTHZ);
      };
      socket.on('error', () => {});
      socket.once('connect', () => (how === 'silent' ? resolve() : send()));
      // A FIN: the server gave the connection up; the next request goes on a new one.
      socket.once('end', () => (last = true));
      socket.on('data', (chunk: Buffer) => {
        const text = chunk.toString('latin1');
        answered += text.split('HTTP/1.1 ').length - 1;
        last ||= /\r\nconnection: close\r\n/i.test(text);
        options.answeredAt?.set(address, performance.now());
        resolve();
        if (goOn()) setTimeout(() => (last ? socket.destroy() : send()), againMs);
      });
      socket.once('close', () => {
        resolve();
        // One refused as it opened was never admitted: its request was never read.
        if (!stopped && answered > 0) options.cut.count += sent - answered;
        if (goOn()) setTimeout(start, how === 'busy' ? 20 : againMs);
      });
    });
  return start();
}

/** Milliseconds from connecting to a 200 for GET /healthz on a connection from `address` that stays open; Infinity when closed first. */
export function servedKeptOpen(sockets: Socket[], port: number, address: string): Promise<number> {
  return new Promise((resolve) => {
    const started = performance.now();
    const socket = connect({ port, host: '127.0.0.1', localAddress: address });
    sockets.push(socket);
    socket.on('error', () => {});
    socket.once('data', (chunk) =>
      resolve(chunk.toString('latin1').startsWith('HTTP/1.1 200') ? performance.now() - started : Infinity),
    );
    socket.once('close', () => resolve(Infinity));
    socket.write(HEALTHZ);
  });
}
