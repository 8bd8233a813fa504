import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open.js';

/*
 * The refused-key limit's memory under a flood: serves the app behind a trusted proxy
 * (127.0.0.1), sends KEYS requests over loopback, each with a different made-up key and,
 * every ADDRESS_REPEATS (1) of them, a different X-Forwarded-For address, with the refused-key
 * limit at LIMIT (60, the default), and prints one JSON line with the answers and the heap and
 * RSS after a full collection, before and after.
 *
 *   node --expose-gc --import tsx test/refused-keys-probe.ts                     (100,000 keys)
 *   LIMIT=2 ADDRESS_REPEATS=4 node --expose-gc --import tsx test/refused-keys-probe.ts
 */

const keys = Number(process.env.KEYS ?? 100_000);
const repeats = Number(process.env.ADDRESS_REPEATS ?? 1);
const limit = process.env.LIMIT ?? '60';
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error('run with --expose-gc');

const dir = mkdtempSync(join(tmpdir(), 'petstore-refused-keys-'));
const config = loadConfig({
  PETSTORE_DB: join(dir, 'petstore.db'),
  PETSTORE_TRUST_PROXY: '127.0.0.1',
  PETSTORE_AUTH_FAILURE_LIMIT: limit,
  LOG_LEVEL: 'silent',
});
const store = await openStore(config);
await store.migrate();
const app = await buildApp({ config, store, logger: false });
await app.listen({ host: '127.0.0.1', port: 0 });
const { port } = app.server.address() as AddressInfo;
const agent = new Agent({ keepAlive: true, maxSockets: 8 });

/**
 * The i-th address: IPv4 from 10.0.0.0/8, every third one IPv6 from 2001:db8::/32, each in a
 * /64 of its own (per-address limits count an IPv6 client by its /64).
 */
const addressOf = (i: number) =>
  i % 3 === 0
    ? `2001:db8:${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}::1`
    : `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`;

const statuses: Record<string, number> = {};
function refusedKey(i: number): Promise<void> {
  const key = `psk_${i.toString(36).padStart(43, 'x')}`;
  return new Promise((resolve, reject) => {
    const request = httpRequest(
      {
        host: '127.0.0.1',
        port,
        path: '/v1/pets',
        agent,
        headers: { authorization: `Bearer ${key}`, 'x-forwarded-for': addressOf(Math.floor(i / repeats)) },
      },
      (response) => {
        statuses[response.statusCode!] = (statuses[response.statusCode!] ?? 0) + 1;
        response.resume();
        response.on('end', resolve);
      },
    );
    request.on('error', reject);
    request.end();
  });
}

async function send(from: number, to: number) {
  const batch = 8;
  for (let i = from; i < to; i += batch) {
    await Promise.all([...Array(Math.min(batch, to - i)).keys()].map((j) => refusedKey(i + j)));
  }
}

async function settle() {
  await new Promise((resolve) => setTimeout(resolve, 200));
  for (let i = 0; i < 4; i++) {
    gc!();
    await new Promise((resolve) => setImmediate(resolve));
  }
  const { heapUsed, rss } = process.memoryUsage();
  return { heapUsed, rss };
}

// Warm-up (JIT, statement caches, the agent's sockets), then the flood from fresh addresses.
const warmUp = 2_000;
await send(0, warmUp);
const before = await settle();
const started = performance.now();
await send(warmUp, warmUp + keys);
const durationMs = Math.round(performance.now() - started);
const after = await settle();
agent.destroy();
await app.close();
await store.close();
rmSync(dir, { recursive: true, force: true });
const MiB = 1024 * 1024;
const mib = (bytes: number) => Math.round((bytes / MiB) * 100) / 100;
process.stdout.write(
  JSON.stringify({
    keys,
    addresses: Math.ceil(keys / repeats),
    limit: Number(limit),
    durationMs,
    statuses,
    before: { heapMiB: mib(before.heapUsed), rssMiB: mib(before.rss) },
    after: { heapMiB: mib(after.heapUsed), rssMiB: mib(after.rss) },
    heapGrowthBytes: after.heapUsed - before.heapUsed,
    rssGrowthBytes: after.rss - before.rss,
  }) + '\n',
);
