import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { childEnv, freePort, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

// On PostgreSQL, whose migrations take a few round trips: probes meet the start while it migrates.
test(
  'clients that connect while the service starts (health probes) are let go, and it goes on to listen',
  { skip: postgresSkip },
  async (t) => {
    const port = await freePort();
    const databaseUrl = await createPostgresSchema(t);
    const sockets: Socket[] = [];
    t.after(() => sockets.forEach((socket) => socket.destroy()));
    let listening = false;
    const started = startServer(t, childEnv(t, { PORT: String(port), DATABASE_URL: databaseUrl }));
    started.then(
      () => (listening = true),
      () => (listening = true),
    );
    // Each socket stays open from this side: a start that waited for its clients would never listen.
    for (let tries = 0; !listening && tries < 5000; tries++) {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => socket.destroy());
      sockets.push(socket);
      await sleep(1);
    }
    const server = await started;
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200);
    assert.ok(sockets.length > 1, 'probes were sent while it started');
  },
);
