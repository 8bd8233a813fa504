// What tracing costs in memory (docs/operations.md#tracing): the built service under a modest,
// bounded load (autocannon, getPet, a few connections), with tracing off, then on with spans sent
// to a collector that accepts them and to one that never answers, each with the batch span
// processor's settings as the service ships them and as the OpenTelemetry SDK has them by
// default. RSS read from /proc/<pid>/status. Run after `npm run build`:
//
//   node --import tsx bench/tracing-memory.ts [--seconds 10] [--connections 4] [--rounds 1] [--only <words>] [--heap]
//     [--node-options=--max-old-space-size=128]
//
// --heap also writes a heap snapshot of each service after its load (--heapsnapshot-signal) and
// shows the live heap it holds: what is still referenced, as against what RSS keeps.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import autocannon from 'autocannon';
import { ROOT, startService, type Running } from './processes.js';

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    connections: { type: 'string', default: '4' },
    rounds: { type: 'string', default: '1' },
    only: { type: 'string' },
    heap: { type: 'boolean', default: false },
    'node-options': { type: 'string', default: '' },
  },
});
const SECONDS = Number(values.seconds);
const CONNECTIONS = Number(values.connections);
const ROUNDS = Number(values.rounds);

// The OpenTelemetry SDK's own defaults for the batch span processor.
const SDK_DEFAULTS = {
  OTEL_BSP_MAX_QUEUE_SIZE: '2048',
  OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '512',
  OTEL_BSP_SCHEDULE_DELAY: '5000',
  OTEL_BSP_EXPORT_TIMEOUT: '30000',
};

/** A collector that reads each export and answers 200, as bench/otlp-sink.mjs does. */
async function acceptingCollector() {
  const server = createHttpServer((request, response) => {
    request.resume();
    request.on('end', () => response.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, close: () => server.close() };
}

/** A collector that accepts connections, reads nothing and never answers. */
async function silentCollector() {
  const sockets = new Set<Socket>();
  const server = createTcpServer((socket) => {
    sockets.add(socket);
    socket.pause();
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

function cli(args: string[], env: Record<string, string>): string {
  const run = spawnSync('node', ['dist/main.js', ...args], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', ...env },
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`petstore ${args.join(' ')}: ${run.stderr}`);
  return run.stdout;
}

/** Sends SIGUSR2 and resolves to the live heap, in bytes, of the snapshot the service writes. */
async function liveHeap(service: Running, folder: string): Promise<number> {
  const before = new Set(readdirSync(folder));
  service.child.kill('SIGUSR2');
  let size = -1;
  for (let round = 0; round < 600; round++) {
    await sleep(100);
    const file = readdirSync(folder).find((name) => name.endsWith('.heapsnapshot') && !before.has(name));
    if (file === undefined) continue;
    const path = join(folder, file);
    const now = statSync(path).size;
    if (now > 0 && now === size) {
      const { snapshot, nodes } = JSON.parse(readFileSync(path, 'utf8')) as {
        snapshot: { meta: { node_fields: string[] } };
        nodes: number[];
      };
      rmSync(path);
      const fields = snapshot.meta.node_fields;
      const selfSize = fields.indexOf('self_size');
      let total = 0;
      for (let i = selfSize; i < nodes.length; i += fields.length) total += nodes[i]!;
      return total;
    }
    size = now;
  }
  throw new Error(`${service.name}: no heap snapshot within 60 s`);
}

const mb = (bytes: number | undefined) => (bytes === undefined ? NaN : Math.round(bytes / 2 ** 20));

const folder = mkdtempSync(join(tmpdir(), 'petstore-tracing-memory-'));
const db = { PETSTORE_DB: join(folder, 'petstore.db') };
cli(['migrate'], db);
const { key } = JSON.parse(cli(['keys', 'create', '--name', 'tracing-memory', '--json'], db)) as { key: string };

const accepting = await acceptingCollector();
const silent = await silentCollector();
const variants: [string, Record<string, string>][] = [
  ['tracing off', {}],
  ['accepting collector, shipped settings', { OTEL_EXPORTER_OTLP_ENDPOINT: accepting.url }],
  ['accepting collector, SDK defaults', { OTEL_EXPORTER_OTLP_ENDPOINT: accepting.url, ...SDK_DEFAULTS }],
  [
    'accepting collector, nothing sampled',
    { OTEL_EXPORTER_OTLP_ENDPOINT: accepting.url, OTEL_TRACES_SAMPLER: 'always_off' },
  ],
  ['collector never answers, shipped settings', { OTEL_EXPORTER_OTLP_ENDPOINT: silent.url }],
  ['collector never answers, SDK defaults', { OTEL_EXPORTER_OTLP_ENDPOINT: silent.url, ...SDK_DEFAULTS }],
];

console.log(
  `getPet, ${CONNECTIONS} connections, ${SECONDS} s, Node.js ${process.version} ${values['node-options']}; RSS in MiB`,
);
const heapColumn = values.heap ? [' live heap |', ' ---: |'] : ['', ''];
console.log(`| variant | requests/s | RSS idle | RSS at the end | peak RSS |${heapColumn[0]}`);
console.log(`| --- | ---: | ---: | ---: | ---: |${heapColumn[1]}`);
try {
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, env] of variants.filter(([name]) => name.includes(values.only ?? ''))) {
      const snapshots = values.heap ? `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${folder}` : '';
      const nodeOptions = { NODE_OPTIONS: `${values['node-options']} ${snapshots}`.trim() };
      const service = await startService(
        name,
        { ...db, LOG_LEVEL: 'warn', ...nodeOptions, ...env },
        undefined,
        join(folder, 'log'),
      );
      try {
        const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
        const created = await fetch(`${service.url}/v1/pets`, {
          method: 'POST',
          headers,
          body: JSON.stringify({ name: 'Rex', categoryId: 7 }),
        });
        const { id } = (await created.json()) as { id: number };
        await sleep(1000);
        const idle = service.rss();
        const result = await autocannon({
          url: `${service.url}/v1/pets/${id}`,
          connections: CONNECTIONS,
          duration: SECONDS,
          headers: { authorization: `Bearer ${key}` },
        });
        const end = service.rss();
        const peak = service.peakRss();
        const failed = result.non2xx + result.errors + result.timeouts;
        if (failed > 0) throw new Error(`${name}: ${failed} requests failed`);
        const heap = values.heap ? ` ${mb(await liveHeap(service, folder))} |` : '';
        console.log(
          `| ${name} | ${Math.round(result.requests.average)} | ${mb(idle)} | ${mb(end)} | ${mb(peak)} |${heap}`,
        );
      } finally {
        await service.stop();
      }
    }
  }
} finally {
  accepting.close();
  silent.close();
  rmSync(folder, { recursive: true, force: true });
}
