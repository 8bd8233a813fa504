import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { childEnv, runCli, startServer } from './process.js';

test('SIGTERM lets an in-flight request finish, refuses new connections and exits 0', async (t) => {
  const env = childEnv(t);
  const { key } = JSON.parse((await runCli(['keys', 'create', '--name', 'ci', '--json'], env)).stdout);
  const server = await startServer(t, env);
  const { port } = new URL(server.url);

  // A create whose body is still arriving when the signal comes.
  const body = '{"name":"Late","categoryId":7}';
  const socket = connect(Number(port), '127.0.0.1');
  await new Promise((resolve) => socket.once('connect', resolve));
  let answer = '';
  socket.on('data', (chunk) => (answer += chunk));
  const closed = new Promise((resolve) => socket.once('close', resolve));
  socket.write(
    `POST /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\n` +
      `Content-Type: application/json\r\nContent-Length: ${body.length}\r\nConnection: close\r\n\r\n` +
      body.slice(0, 10),
  );
  await fetch(`${server.url}/healthz`); // the request above is now being read
  server.child.kill('SIGTERM');
  await server.waitForOutput(/"msg":"draining"/);

  // The listener closes just after "draining" is logged: probe until refused, bounded.
  const probe = () =>
    new Promise<string>((resolve) => {
      const connection = connect(Number(port), '127.0.0.1');
      connection.once('connect', () => (connection.destroy(), resolve('connected')));
      connection.once('error', (error: NodeJS.ErrnoException) => resolve(error.code ?? 'error'));
    });
  let refused = await probe();
  for (let attempt = 0; attempt < 50 && refused === 'connected'; attempt++) {
    await new Promise((resolve) => setTimeout(resolve, 20));
    refused = await probe();
  }
  socket.end(body.slice(10));
  await closed;

  assert.match(answer, /^HTTP\/1\.1 201 Created\r\n/);
  assert.ok(answer.endsWith('{"id":1,"name":"Late","categoryId":7,"status":"available"}'), answer);
  // Refused outright, or reset from the backlog of the closing listener: either way not served.
  assert.ok(['ECONNREFUSED', 'ECONNRESET'].includes(refused), refused);
  assert.deepEqual(await server.exited, { code: 0, signal: null });
});
