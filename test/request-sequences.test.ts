import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import Database from 'better-sqlite3';
import fc from 'fast-check';
import { PIPELINE_LIMIT } from '../src/http/pipelining.js';
import { childEnv, startServer, type Server } from './process.js';
import { parseResponses } from './raw.js';

// The service as deployed (dist/main.js serve): a request that stops the process shows only there.

/** The service with small timeouts, its port and its first key. */
async function serve(t: TestContext, extra: Record<string, string> = {}) {
  const env = childEnv(t, {
    PETSTORE_STALL_TIMEOUT_MS: '1000',
    PETSTORE_HEADERS_TIMEOUT_MS: '1000',
    PETSTORE_REQUEST_TIMEOUT_MS: '2000',
    PETSTORE_KEEP_ALIVE_TIMEOUT_MS: '1000',
    ...extra,
  });
  const server = await startServer(t, env);
  const port = Number(new URL(server.url).port);
  const key = (await server.waitForOutput(/^ {4}(psk_\S+)$/m))[1]!;
  return { server, port, key, env };
}

/** True while the process runs and answers GET /healthz on a new connection with 200. */
async function alive(server: Server, port: number): Promise<boolean> {
  if (server.child.exitCode !== null || server.child.signalCode !== null) return false;
  const response = await fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(2_000) });
  await response.text();
  return response.status === 200 && server.child.exitCode === null;
}

/** How a sequence's connection ends on the client's side, after `at` of its bytes. */
type Ending = { how: 'end' | 'destroy'; at: number };

/**
 * Writes `chunks` one after the other, `pauseMs` apart, ends as `ending` says, and resolves
 * with what the server sent until it closed (or `waitMs` after the last write) and whether the
 * client cut the connection itself.
 */
function converse(port: number, chunks: Buffer[], pausesMs: number[], ending: Ending, waitMs: number) {
  return new Promise<{ raw: Buffer; cut: boolean }>((resolve) => {
    const socket: Socket = connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    const received: Buffer[] = [];
    let cut = false;
    let timer: NodeJS.Timeout | undefined;
    const finish = () => {
      clearTimeout(timer);
      socket.destroy();
      resolve({ raw: Buffer.concat(received), cut });
    };
    socket.on('data', (chunk) => received.push(chunk));
    socket.on('error', () => {});
    socket.on('close', finish);
    socket.once('connect', async () => {
      let sent = 0;
      for (const [i, chunk] of chunks.entries()) {
        const room = ending.at - sent;
        if (room < chunk.length) {
          if (room > 0) socket.write(chunk.subarray(0, room));
          break;
        }
        if (socket.destroyed) return;
        socket.write(chunk);
        sent += chunk.length;
        if (pausesMs[i]) await sleep(pausesMs[i]);
      }
      if (socket.destroyed) return;
      if (ending.how === 'destroy') {
        cut = true;
        return finish();
      }
      socket.end();
      timer = setTimeout(() => {
        cut = true;
        finish();
      }, waitMs);
    });
  });
}

/** One request of a sequence: its bytes (with `KEY` for the API key) and its method as the server sees it. */
type Request = { method: string; text: string };

const body = JSON.stringify({ name: 'Rex', categoryId: 7 });
const post = (extra: string, auth: boolean, sent = body) =>
  `POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n${auth ? 'Authorization: Bearer KEY\r\n' : ''}` +
  `${extra}Content-Length: ${Buffer.byteLength(sent)}\r\n\r\n${sent}`;
const chunked = (half: number) =>
  `POST /v1/pets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAuthorization: Bearer KEY\r\n` +
  `Transfer-Encoding: chunked\r\n\r\n${half.toString(16)}\r\n${body.slice(0, half)}\r\n` +
  `${(body.length - half).toString(16)}\r\n${body.slice(half)}\r\n0\r\n\r\n`;

/** Every kind of request node:http hands to a listener, and a few it answers itself. */
const KINDS: Request[] = [
  { method: 'GET', text: 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'HEAD', text: 'HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'HEAD', text: 'HEAD /v1/pets HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n\r\n' },
  { method: 'GET', text: 'GET /v1/pets?limit=2 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n\r\n' },
  { method: 'GET', text: 'GET /v1/openapi.json HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'GET', text: 'GET http://127.0.0.1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz HTTP/1.0\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' },
  { method: 'GET', text: 'GET /v1/pets HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n' },
  {
    method: 'GET',
    text: 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n',
  },
  { method: 'CONNECT', text: 'CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n' },
  { method: 'CONNECT', text: 'CONNECT /v1/pets HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'CONNECT', text: 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc' },
  { method: 'OPTIONS', text: 'OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'TRACE', text: 'TRACE / HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'DELETE', text: 'DELETE /v1/pets/1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer KEY\r\n\r\n' },
  { method: 'BREW', text: 'BREW /healthz HTTP/1.1\r\nHost: x\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n' },
  { method: 'GET', text: 'GET /healthz\r\nHost: x\r\n\r\n' },
  ...[false, true].flatMap((auth) =>
    ['', 'Expect: 100-continue\r\n'].map((expect) => ({ method: 'POST', text: post(expect, auth) })),
  ),
  // A body that is not JSON.
  { method: 'POST', text: post('', true, '{"name":') },
  { method: 'POST', text: chunked(10) },
];

const requests: fc.Arbitrary<Request> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...KINDS) },
  fc.integer({ min: 1, max: body.length - 1 }).map((half) => ({ method: 'POST', text: chunked(half) })),
);

/** One request, or a run past the pipelining limit (PIPELINE_LIMIT). */
const runs = fc.oneof(
  { weight: 20, arbitrary: requests.map((request) => [request]) },
  fc.constant(
    Array<Request>(PIPELINE_LIMIT + 6).fill({ method: 'GET', text: 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n' }),
  ),
);

const sequences = fc.record({
  requests: fc.array(runs, { minLength: 1, maxLength: 6 }).map((parts) => parts.flat()),
  // Where the bytes are split into writes (fractions of their length), and the pause after each.
  splits: fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 4 }),
  pausesMs: fc.array(fc.integer({ min: 0, max: 30 }), { minLength: 5, maxLength: 5 }),
  // Most runs half-close after the last byte and read every answer; the others close, or
  // reset, at any point.
  ending: fc.oneof(
    { weight: 3, arbitrary: fc.constant({ how: 'end' as const, at: 1 }) },
    fc.record({
      how: fc.constantFrom<Ending['how']>('end', 'destroy'),
      at: fc.double({ min: 0, max: 1, noNaN: true }),
    }),
  ),
});

test('no sequence of requests on one connection stops the service, and every answer is well-formed HTTP/1.1', async (t) => {
  const { server, port, key } = await serve(t);
  let runs = 0;
  let answers = 0;
  const statuses = new Map<number, number>();
  await fc.assert(
    fc.asyncProperty(sequences, async ({ requests: sent, splits, pausesMs, ending }) => {
      runs++;
      const bytes = Buffer.from(sent.map(({ text }) => text.replaceAll('KEY', key)).join(''), 'latin1');
      const cuts = [...new Set(splits.map((at) => Math.round(at * bytes.length)))].sort((a, b) => a - b);
      const chunks = [0, ...cuts]
        .map((from, i) => bytes.subarray(from, [...cuts, bytes.length][i]))
        .filter((chunk) => chunk.length > 0);
      const at = Math.round(ending.at * bytes.length);
      const { raw, cut } = await converse(port, chunks, pausesMs, { how: ending.how, at }, 3_000);
      const { responses, truncated } = parseResponses(
        raw,
        sent.map(({ method }) => method),
      );
      assert.ok(
        !truncated || cut || at < bytes.length,
        `an answer was cut short: ${raw.toString('latin1').slice(-300)}`,
      );
      answers += responses.length;
      for (const { status } of responses) statuses.set(status, (statuses.get(status) ?? 0) + 1);
      assert.ok(await alive(server, port), `the service stopped: ${server.stderr().slice(-2000)}`);
    }),
    { numRuns: 150, interruptAfterTimeLimit: 60_000, markInterruptAsFailure: false, endOnFailure: true },
  );
  t.diagnostic(`${runs} sequences, ${answers} answers: ${JSON.stringify(Object.fromEntries(statuses))}`);
  assert.ok(runs >= 30, `only ${runs} sequences within the time limit`);
  // The sequences reach the routes and their refusals, not only the parser's.
  assert.ok(statuses.has(200) && statuses.has(201) && statuses.has(401), JSON.stringify(Object.fromEntries(statuses)));
  assert.ok(answers > runs / 2, `${answers} answers to ${runs} sequences`);
  assert.equal(server.child.exitCode, null);
});

test('every pair of requests in one write, and in two: the service answers each well-formed and stays up', async (t) => {
  const { server, port, key } = await serve(t);
  let pairs = 0;
  const started = performance.now();
  for (const first of KINDS) {
    for (const second of KINDS) {
      const texts = [first, second].map(({ text }) => Buffer.from(text.replaceAll('KEY', key), 'latin1'));
      // Odd pairs go as two writes 5 ms apart: the second request comes while the first is answered.
      const chunks = pairs % 2 === 0 ? [Buffer.concat(texts)] : texts;
      const { raw, cut } = await converse(port, chunks, [5], { how: 'end', at: Infinity }, 3_000);
      const { truncated } = parseResponses(raw, [first.method, second.method]);
      assert.ok(!truncated || cut, `${first.text} + ${second.text}: an answer was cut short`);
      assert.ok(await alive(server, port), `the service stopped after ${first.text} + ${second.text}`);
      pairs++;
      assert.ok(performance.now() - started < 120_000, `only ${pairs} pairs within 120 s`);
    }
  }
  t.diagnostic(`${pairs} pairs in ${Math.round(performance.now() - started)} ms`);
});

test('GET /healthz and CONNECT in one write: both answered in order, then the connection closes', async (t) => {
  const { server, port } = await serve(t);
  const { raw, cut } = await converse(
    port,
    [Buffer.from('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nCONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n')],
    [],
    { how: 'end', at: Infinity },
    3_000,
  );
  assert.equal(cut, false, 'the service closed the connection');
  const { responses } = parseResponses(raw, ['GET', 'CONNECT']);
  assert.deepEqual(
    responses.map(({ statusLine }) => statusLine),
    ['HTTP/1.1 200 OK', 'HTTP/1.1 404 Not Found'],
  );
  assert.equal(responses[1]!.headers.get('connection'), 'close');
  assert.ok(await alive(server, port));
});

test('a CONNECT sent while the answer before it waits on the database is answered after it', async (t) => {
  const { server, port, key, env } = await serve(t, { PETSTORE_DB_TIMEOUT_MS: '3000' });
  // Another process's write lock on the file: the create waits for it.
  const db = new Database(env.PETSTORE_DB!);
  t.after(() => db.close());
  db.exec('BEGIN IMMEDIATE');
  const socket = connect({ port, host: '127.0.0.1' });
  t.after(() => socket.destroy());
  socket.on('error', () => {});
  const received: Buffer[] = [];
  socket.on('data', (chunk) => received.push(chunk));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.write(post('', true).replaceAll('KEY', key));
  await sleep(300);
  socket.write('CONNECT a:1 HTTP/1.1\r\nHost: a:1\r\n\r\n');
  await sleep(300);
  assert.equal(server.child.exitCode, null, 'the service stopped');
  assert.equal(received.length, 0, 'answered while the lock was held');
  db.exec('COMMIT');
  await closed;
  const { responses, truncated } = parseResponses(Buffer.concat(received), ['POST', 'CONNECT']);
  assert.equal(truncated, false);
  assert.deepEqual(
    responses.map(({ statusLine }) => statusLine),
    ['HTTP/1.1 201 Created', 'HTTP/1.1 404 Not Found'],
  );
  assert.ok(await alive(server, port));
});
