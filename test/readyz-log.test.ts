import assert from 'node:assert/strict';
import { once } from 'node:events';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { childEnv, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

/** A TCP proxy on 127.0.0.1 in front of PostgreSQL, that the test cuts (refused) and restores. */
class Cut {
  port = 0;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();

  constructor(private readonly target: URL) {}

  async open(): Promise<void> {
    const server = createServer((client) => {
      const upstream = connect(Number(this.target.port || 5432), this.target.hostname);
      for (const socket of [client, upstream]) {
        this.sockets.add(socket);
        socket.on('error', () => {});
        socket.on('close', () => {
          client.destroy();
          upstream.destroy();
          this.sockets.delete(socket);
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    server.listen(this.port, '127.0.0.1');
    await once(server, 'listening');
    this.port = (server.address() as AddressInfo).port;
    this.server = server;
  }

  async close(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    if (server) await new Promise((resolve) => server.close(resolve));
  }
}

interface LogLine {
  level: number;
  msg: string;
  cause?: unknown;
  err?: unknown;
  stack?: unknown;
}

test(
  '/readyz logs a database outage once when it starts (warn, its cause once, no stack) and once when it ends (info)',
  { skip: postgresSkip, timeout: 120_000 },
  async (t) => {
    const url = new URL(await createPostgresSchema(t));
    const cut = new Cut(new URL(url));
    await cut.open();
    t.after(() => cut.close());
    url.port = String(cut.port);
    const env = childEnv(t, { DATABASE_URL: url.href });
    const server = await startServer(t, env, 60_000);
    let logs = '';
    server.child.stdout!.on('data', (chunk) => (logs += chunk));
    const ready = async () => (await fetch(`${server.url}/readyz`)).status;

    assert.equal(await ready(), 200);
    await cut.close();
    for (let i = 0; i < 4; i++) assert.equal(await ready(), 503);
    await cut.open();
    // The pool opens a new connection on the next call; a few tries, bounded.
    let status = 503;
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = await ready();
      if (status !== 200) await sleep(100);
    }
    assert.equal(status, 200);
    for (let i = 0; i < 3; i++) assert.equal(await ready(), 200);
    server.child.kill('SIGTERM');
    await server.exited;

    const lines = logs
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as LogLine);
    const down = lines.filter((line) => line.msg === 'database not reachable');
    const back = lines.filter((line) => line.msg === 'database reachable again');
    assert.equal(down.length, 1, logs);
    assert.equal(down[0]!.level, 40, 'warn');
    assert.equal(typeof down[0]!.cause, 'string');
    const cause = down[0]!.cause as string;
    assert.match(cause, /ECONNREFUSED|connect|terminat|closed|timeout/i, cause);
    assert.doesNotMatch(cause, /\n/);
    assert.equal(back.length, 1, logs);
    assert.equal(back[0]!.level, 30, 'info');
    // Nothing else about it: no error line, no stack anywhere, the cause written once.
    assert.equal(lines.filter((line) => line.level >= 50).length, 0, logs);
    assert.doesNotMatch(logs, /"stack"|\\n\s+at /);
    assert.equal(logs.split(cause).length - 1, 1, `the cause appears once: ${logs}`);
  },
);
