import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { test } from 'node:test';
import { listeningApp } from './helpers.js';
import { assertRawError, parseResponse } from './raw.js';

const BODY = '{"name":"Rex","categoryId":7}';

/**
 * Sends `head` (a request's line and fields, no body) and resolves with what the server sends
 * first; then, when `body` is given, sends it and resolves `rest` with everything until it closes.
 */
function expectContinue(port: number, head: string, body?: string) {
  const socket = connect({ port, host: '127.0.0.1' });
  let text = '';
  const closed = new Promise<string>((resolve) => {
    socket.on('close', () => resolve(text));
    socket.on('error', () => {});
  });
  const timer = setTimeout(() => socket.destroy(), 5_000);
  socket.on('close', () => clearTimeout(timer));
  const first = new Promise<string>((resolve) => {
    socket.once('data', (chunk) => {
      text += chunk.toString('utf8');
      socket.on('data', (more) => (text += more.toString('utf8')));
      resolve(text);
      if (body !== undefined) socket.end(body);
    });
  });
  socket.write(head);
  return { first, rest: closed };
}

test('Expect: 100-continue without a valid key gets its 401 with no 100 Continue first', async (t) => {
  const app = await listeningApp(t);
  for (const authorization of ['', 'Authorization: Bearer psk_wrong\r\n']) {
    const { first, rest } = expectContinue(
      app.port,
      `POST /v1/pets HTTP/1.1\r\nHost: a\r\n${authorization}Content-Type: application/json\r\n` +
        `Content-Length: ${BODY.length}\r\nExpect: 100-continue\r\n\r\n`,
    );
    assert.match(await first, /^HTTP\/1\.1 401 Unauthorized\r\n/);
    const all = await rest;
    assert.doesNotMatch(all, /100 Continue/);
    assertRawError(all, 'HTTP/1.1 401 Unauthorized', 'unauthorized', 401);
  }
  assert.deepEqual(await app.store.listPets({ limit: 10 }), []);
});

test('Expect: 100-continue with a valid key gets 100 Continue, then its 201 once the body is sent', async (t) => {
  const app = await listeningApp(t);
  const { first, rest } = expectContinue(
    app.port,
    `POST /v1/pets HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer ${app.key}\r\nContent-Type: application/json\r\n` +
      `Content-Length: ${BODY.length}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n`,
    BODY,
  );
  assert.equal(await first, 'HTTP/1.1 100 Continue\r\n\r\n');
  const all = await rest;
  assert.equal(parseResponse(all.slice('HTTP/1.1 100 Continue\r\n\r\n'.length)).statusLine, 'HTTP/1.1 201 Created');
  assert.equal((await app.store.listPets({ limit: 10 })).length, 1);
});
