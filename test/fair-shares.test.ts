import assert from 'node:assert/strict';
import { Agent, request } from 'node:http';
import { connect, Socket, type AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { Worker } from 'node:worker_threads';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { HEALTHZ, holder, listen, servedKeptOpen, sleep, type Hold } from './crowd.js';
import { tempSqliteStore } from './helpers.js';

test('200 keep-alive connections from one address, each sending requests and reading answers, all get their answers with the defaults', async (t) => {
  const app = await listen(t);
  const agent = new Agent({ keepAlive: true, maxSockets: 200 });
  t.after(() => agent.destroy());
  const get = () =>
    new Promise<number>((resolve, reject) => {
      const req = request(
        {
          host: '127.0.0.1',
          port: app.port,
          path: '/v1/pets?limit=5',
          agent,
          headers: { authorization: `Bearer ${app.key}` },
        },
        (response) => {
          response.resume();
          response.on('end', () => resolve(response.statusCode!));
        },
      );
      req.on('error', reject);
      req.end();
    });
  for (let round = 0; round < 3; round++) {
    const statuses = await Promise.all([...Array(200).keys()].map(get));
    assert.deepEqual(
      statuses.filter((status) => status !== 200),
      [],
    );
  }
  const open = await new Promise<number>((resolve) => app.app.server.getConnections((_, n) => resolve(n)));
  assert.equal(open, 200, 'every connection stays open between rounds');
  assert.deepEqual(await app.closedBy(), {});
});

test('150 concurrent fetch POSTs from one process all get 201', async (t) => {
  const app = await listen(t);
  const responses = await Promise.all(
    [...Array(150).keys()].map((i) =>
      fetch(`http://127.0.0.1:${app.port}/v1/pets`, {
        method: 'POST',
        headers: { authorization: `Bearer ${app.key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: `Rex ${i}`, categoryId: i }),
      }).then(async (response) => ({ status: response.status, body: await response.text() })),
    ),
  );
  assert.deepEqual(
    responses.filter(({ status }) => status !== 201),
    [],
  );
  assert.equal(new Set(responses.map(({ body }) => JSON.parse(body).id)).size, 150);
  assert.deepEqual(await app.closedBy(), {});
});

const reasonFor: Record<Hold, string> = { silent: 'silent_evicted', idle: 'idle_evicted', busy: 'busy_evicted' };

for (const addresses of [4, 16]) {
  for (const how of ['silent', 'idle', 'busy'] as const) {
    test(`${addresses} addresses holding every slot with ${how} connections: new clients from other addresses are served within a second`, async (t) => {
      const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '32' }, true);
      const holders = [];
      const cut = { count: 0 };
      for (let i = 0; i < 32; i++) {
        holders.push(holder(t, app.sockets, app.port, `127.0.0.${2 + (i % addresses)}`, how, { cut }));
      }
      await Promise.all(holders);
      // Long enough for the silent and idle ones to count as such.
      await sleep(400);
      assert.equal(await app.openCount(), 32, 'the holders took every slot');
      // New clients keeping their connections, more than the spare slots (4): then the holders
      // must give up theirs. One refused as it opens tries again 20 ms later.
      for (const address of ['127.0.1.1', '127.0.1.2', '127.0.1.3', '127.0.1.4', '127.0.1.5', '127.0.1.6']) {
        const started = performance.now();
        while ((await servedKeptOpen(app.sockets, app.port, address)) === Infinity) {
          assert.ok(performance.now() - started < 1_000, `${address}: ${JSON.stringify(await app.closedBy())}`);
          await sleep(20);
        }
        const waited = performance.now() - started;
        assert.ok(waited < 1_000, `a new client from ${address} waited ${Math.round(waited)} ms`);
      }
      await sleep(300);
      const closed = await app.closedBy();
      assert.ok((closed[reasonFor[how]] ?? 0) >= 2, JSON.stringify(closed));
      // Given up by the holders without a request cut off (those refused as they opened sent nothing).
      assert.equal(cut.count, 0);
      for (const reason of ['slow_reader', 'no_progress']) assert.equal(closed[reason], undefined, reason);
    });
  }
}

test('holders that read nothing give up their slots within the stall timeout: new clients are served', async (t) => {
  const stallMs = 800;
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '8', PETSTORE_STALL_TIMEOUT_MS: String(stallMs) }, true);
  const { sockets } = app;
  for (let i = 0; i < 8; i++) {
    const socket = connect({ port: app.port, host: '127.0.0.1', localAddress: `127.0.0.${2 + (i % 4)}` });
    sockets.push(socket);
    socket.on('error', () => {});
    // Pipelined, within the limit, and never read: the answers (1.6 MB each) fill the buffers.
    await new Promise((resolve) =>
      socket.once('connect', () =>
        socket.write('GET /docs/static/swagger-ui-bundle.js HTTP/1.1\r\nHost: x\r\n\r\n'.repeat(10), resolve),
      ),
    );
    socket.pause();
  }
  await sleep(300);
  // More new clients than the spare slots (4), each keeping its connection: the last ones need
  // slots the holders give up, which they do once their stall is noticed.
  const started = performance.now();
  for (const address of ['127.0.1.1', '127.0.1.2', '127.0.1.3', '127.0.1.4', '127.0.1.5', '127.0.1.6']) {
    while ((await servedKeptOpen(sockets, app.port, address)) === Infinity) {
      assert.ok(performance.now() - started < stallMs + 2_500, 'not served within the stall timeout');
      await sleep(50);
    }
  }
  const took = performance.now() - started;
  t.diagnostic(`six new clients served within ${Math.round(took)} ms`);
  assert.ok(took < stallMs + 2_500, `served after ${Math.round(took)} ms`);
  const closed = await app.closedBy();
  assert.ok((closed.slow_reader ?? 0) >= 2, JSON.stringify(closed));
});

// A client in a thread of its own: it writes while the service's event loop is blocked, so
// that its requests wait in the kernel's buffers, unread, when room must be made.
const CLIENT = `
const { connect } = require('node:net');
const { parentPort, workerData: { port } } = require('node:worker_threads');
const sockets = [];
const answers = [];
const open = (localAddress) => {
  const socket = connect({ port, host: '127.0.0.1', localAddress });
  const index = sockets.push(socket) - 1;
  answers[index] = '';
  socket.on('error', () => {});
  socket.on('data', (chunk) => { answers[index] += chunk.toString('latin1'); });
  socket.on('close', () => { answers[index] += ' closed'; });
  return socket;
};
parentPort.on('message', (what) => {
  if (what === 'open') {
    for (let i = 0; i < 8; i++) open('127.0.0.2');
    let connected = 0;
    for (const socket of sockets) socket.once('connect', () => ++connected === 8 && parentPort.postMessage('opened'));
  } else if (what === 'send') {
    for (const socket of sockets) socket.write('${HEALTHZ.replaceAll('\r\n', '\\r\\n')}');
    open('127.0.0.3').write('${HEALTHZ.replaceAll('\r\n', '\\r\\n')}');
  } else if (what === 'report') {
    parentPort.postMessage(answers.map((answer) => answer.slice(0, 15)));
    for (const socket of sockets) socket.destroy();
  }
});
`;

test('a request already sent but not yet read by the service is never given up to make room', async (t) => {
  const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '8' }, true);
  const client = new Worker(CLIENT, { eval: true, workerData: { port: app.port } });
  t.after(() => client.terminate());
  const reply = () => new Promise<unknown>((resolve) => client.once('message', resolve));
  const opened = reply();
  client.postMessage('open');
  await opened;
  // Long enough for the eight to count as silent, had their requests not come.
  await sleep(500);
  client.postMessage('send');
  // The service's event loop stops while the requests and a ninth connection arrive.
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 300);
  await sleep(500);
  const answers = reply();
  client.postMessage('report');
  assert.deepEqual(await answers, Array(9).fill('HTTP/1.1 200 OK'));
  const closed = await app.closedBy();
  assert.equal(closed.silent_evicted, undefined, JSON.stringify(closed));
});

test('each connection closed for the limits leaves a log line: at most one a second per reason, with the group and the count since the last', async (t) => {
  const lines: Record<string, unknown>[] = [];
  const logStream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const line of chunk.toString('utf8').split('\n').filter(Boolean)) lines.push(JSON.parse(line));
      done();
    },
  });
  const kept = new Socket();
  t.after(() => kept.destroy());
  const { store } = await tempSqliteStore(t);
  const config = loadConfig({ PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: '1', LOG_LEVEL: 'warn' });
  const app = await buildApp({ config, store, logStream });
  t.after(() => app.close());
  await issueKey(store, 'test');
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  kept.connect({ port, host: '127.0.0.1', localAddress: '127.0.0.5' });
  await new Promise((resolve) => kept.once('connect', resolve));
  kept.write('GET /healthz HTTP/1.1\r\n');
  // Ten refused from the same address within a second: one line at once, one for the other nine.
  for (let i = 0; i < 10; i++) {
    await new Promise((resolve) => {
      const refused = connect({ port, host: '127.0.0.1', localAddress: '127.0.0.5' });
      refused.on('error', () => {});
      refused.once('close', resolve);
    });
  }
  const about = () => lines.filter((line) => line.reason === 'address_cap');
  assert.equal(about().length, 1);
  assert.deepEqual(
    { ...about()[0], time: undefined, pid: undefined, hostname: undefined, msg: undefined },
    {
      level: 40,
      reason: 'address_cap',
      addressGroup: '127.0.0.5',
      closed: 1,
      time: undefined,
      pid: undefined,
      hostname: undefined,
      msg: undefined,
    },
  );
  await sleep(1_200);
  assert.equal(about().length, 2);
  assert.equal(about()[1]!.closed, 9);
  assert.ok(Number(about()[1]!.time) - Number(about()[0]!.time) >= 990);
});
