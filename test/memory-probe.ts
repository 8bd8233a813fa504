import { readdirSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { InjectOptions } from 'fastify';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { issueKey } from '../src/keys/issue.js';
import { openStore } from '../src/store/open.js';

/*
 * Run by test/memory.test.ts in its own process with --expose-gc: serves the whole app, sends
 * REQUESTS mixed requests (inject) and SOCKET_REQUESTS over real connections, and prints one
 * JSON line with the heap after a full collection and the open file descriptors at checkpoints.
 */

const total = Number(process.env.REQUESTS);
const overSocket = Number(process.env.SOCKET_REQUESTS);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const config = loadConfig({
  ...process.env,
  PORT: '0',
  PETSTORE_RATE_LIMIT: '1000000000',
  // The limits stay on (their bookkeeping is part of what must not grow) but never refuse.
  PETSTORE_AUTH_FAILURE_LIMIT: '1000000000',
});
const store = await openStore(config);
await store.migrate();
const { key } = await issueKey(store, 'memory');
const app = await buildApp({ config, store, logger: false });
await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as AddressInfo;
const auth = { authorization: `Bearer ${key}` };
const json = { ...auth, 'content-type': 'application/json' };

/** The i-th request of the mix: creates, idempotent creates, pages, reads and every kind of refusal. */
function mixed(i: number): InjectOptions {
  switch (i % 10) {
    case 0:
    case 1:
      return { method: 'POST', url: '/v1/pets', headers: json, payload: `{"name":"pet ${i}","categoryId":${i}}` };
    case 2:
      return {
        method: 'POST',
        url: '/v1/pets',
        headers: { ...json, 'idempotency-key': `k-${i % 500}` },
        payload: `{"name":"once ${i % 500}","categoryId":1}`,
      };
    case 3:
      return { method: 'GET', url: `/v1/pets?limit=20&status=available`, headers: auth };
    case 4:
      return { method: 'GET', url: `/v1/pets/${1 + (i % 1000)}`, headers: auth };
    case 5:
      return { method: 'POST', url: '/v1/pets', headers: json, payload: '{"name":"","categoryId":1.5}' };
    case 6:
      return { method: 'GET', url: '/v1/pets', headers: { authorization: `Bearer psk_unknown${i}` } };
    case 7:
      return { method: 'DELETE', url: '/v1/pets/1', headers: auth };
    case 8:
      return { method: 'GET', url: `/v1/nothing/${i}`, headers: auth };
    default:
      return { method: 'GET', url: '/v1/pets?limit=abc', headers: auth };
  }
}

function overConnection(i: number): Promise<void> {
  const { method, url, headers, payload } = mixed(i);
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: '127.0.0.1',
        port,
        method,
        path: url as string,
        headers: headers as Record<string, string>,
        agent: false,
      },
      (response) => {
        response.resume();
        response.on('end', resolve);
      },
    );
    request.on('error', reject);
    request.end(payload as string | undefined);
  });
}

const fds = () => readdirSync('/proc/self/fd').length;

async function settle() {
  await new Promise((resolve) => setTimeout(resolve, 200));
  for (let i = 0; i < 4; i++) {
    gc!();
    await new Promise((resolve) => setImmediate(resolve));
  }
  return { heapUsed: process.memoryUsage().heapUsed, rss: process.memoryUsage().rss, fds: fds() };
}

const statuses: Record<string, number> = {};
async function run(from: number, to: number) {
  for (let i = from; i < to; i++) {
    const response = await app.inject(mixed(i));
    statuses[response.statusCode] = (statuses[response.statusCode] ?? 0) + 1;
    if (response.statusCode >= 500) throw new Error(`request ${i} answered ${response.statusCode}: ${response.body}`);
  }
}

// Warm-up: JIT, statement caches and Fastify's lazily built serializers settle before the baseline.
await run(0, Math.min(5000, total / 10));
const socketBatch = 8;
for (let i = 0; i < 200; i += socketBatch)
  await Promise.all([...Array(socketBatch).keys()].map((j) => overConnection(i + j)));
const baseline = await settle();
const checkpoints: { requests: number; heapUsed: number; rss: number; fds: number }[] = [];
const started = performance.now();
for (let quarter = 1; quarter <= 4; quarter++) {
  await run(((quarter - 1) * total) / 4, (quarter * total) / 4);
  const from = ((quarter - 1) * overSocket) / 4;
  for (let i = from; i < from + overSocket / 4; i += socketBatch) {
    await Promise.all([...Array(socketBatch).keys()].map((j) => overConnection(i + j)));
  }
  checkpoints.push({ requests: (quarter * (total + overSocket)) / 4, ...(await settle()) });
}
const durationMs = Math.round(performance.now() - started);
await app.close();
await store.close();
process.stdout.write(JSON.stringify({ total, overSocket, durationMs, statuses, baseline, checkpoints }) + '\n');
