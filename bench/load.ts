import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import autocannon from 'autocannon';
import { encodeCursor } from '../src/pets/cursor.js';
import { pinned, ROOT } from './processes.js';

export interface Load {
  /** Path and query of the GET (or the mix's GET). */
  path: string;
  kind: 'get' | 'getPet' | 'pages' | 'create' | 'mix';
  /** getPet picks ids in [low, high]; pages lists the page after such an id. */
  ids?: [number, number];
  key?: string;
}

export const WORKLOAD_NAMES = ['list', 'filtered', 'deep', 'pages', 'getPet', 'create', 'mix'] as const;
export type WorkloadName = (typeof WORKLOAD_NAMES)[number];

/** `name` as a workload, or an error that lists them. */
export function workloadName(name: string): WorkloadName {
  const found = WORKLOAD_NAMES.find((known) => known === name);
  if (!found) throw new Error(`a workload is one of ${WORKLOAD_NAMES.join(', ')}, not ${name}`);
  return found;
}

/** The request `name` sends to a store seeded with `pets` animals, with the API key `key`. */
export function workload(name: WorkloadName, pets: number, key: string): Load {
  switch (name) {
    case 'list':
      return { kind: 'get', path: '/v1/pets?limit=20', key };
    case 'filtered':
      return { kind: 'get', path: '/v1/pets?limit=20&status=pending', key };
    case 'deep':
      return {
        kind: 'get',
        path: `/v1/pets?limit=20&cursor=${encodeCursor({ afterId: BigInt(pets - 50), status: undefined })}`,
        key,
      };
    case 'pages':
      return { kind: 'pages', path: '/v1/pets?limit=20', ids: [1, pets - 21], key };
    case 'getPet':
      return { kind: 'getPet', path: '/v1/pets/1', ids: [1, pets], key };
    case 'create':
      return { kind: 'create', path: '/v1/pets', key };
    case 'mix':
      return { kind: 'mix', path: '/v1/pets?limit=20', key };
  }
}

export interface Sample {
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Responses that were not 2xx or 3xx, plus socket errors and timeouts. */
  failures: number;
}

export const CONNECTIONS = 50;
const LOAD_CPU = 0;

// PETSTORE_BENCH_LOAD=autocannon uses the fallback even where wrk is installed.
export const hasWrk = () =>
  process.env.PETSTORE_BENCH_LOAD !== 'autocannon' && spawnSync('wrk', ['--version']).error === undefined;

const scripts = mkdtempSync(join(tmpdir(), 'petstore-bench-lua-'));
process.on('exit', () => rmSync(scripts, { recursive: true, force: true }));
const lua = (name: string) => readFileSync(`${ROOT}bench/lua/${name}.lua`, 'utf8');

/** One wrk script for `load` on `ports`: globals the scripts read, then the workload, then the spreading. */
function scriptFor(load: Load, ports: number[]): string | undefined {
  const parts: string[] = [];
  if (load.kind === 'getPet') parts.push(`LOW, HIGH = ${load.ids![0]}, ${load.ids![1]}`, lua('get-pet'));
  if (load.kind === 'pages') parts.push(`LOW, HIGH = ${load.ids![0]}, ${load.ids![1]}`, lua('random-page'));
  if (load.kind === 'create') parts.push(lua('create-pet'));
  if (load.kind === 'mix') parts.push(lua('mix'));
  if (ports.length > 1) parts.push(`PORTS = { ${ports.join(', ')} }`, lua('spread'));
  if (parts.length === 0) return undefined;
  const file = join(scripts, `${load.kind}-${ports.join('-')}.lua`);
  writeFileSync(file, parts.join('\n'));
  return file;
}

const UNIT_MS: Record<string, number> = { us: 0.001, ms: 1, s: 1000, m: 60_000 };

function toMs(text: string): number {
  const match = /^([0-9.]+)(us|ms|s|m)$/.exec(text);
  if (!match) throw new Error(`unreadable wrk latency ${text}`);
  return Number(match[1]) * UNIT_MS[match[2]!]!;
}

/** Reads wrk's --latency report. */
export function parseWrk(text: string): Sample {
  const rps = /Requests\/sec:\s+([0-9.]+)/.exec(text)?.[1];
  const p50 = /^\s+50%\s+(\S+)/m.exec(text)?.[1];
  const p99 = /^\s+99%\s+(\S+)/m.exec(text)?.[1];
  if (rps === undefined || p50 === undefined || p99 === undefined) throw new Error(`unreadable wrk output:\n${text}`);
  const non2xx = Number(/Non-2xx or 3xx responses:\s+([0-9]+)/.exec(text)?.[1] ?? 0);
  const socket = /Socket errors: connect ([0-9]+), read ([0-9]+), write ([0-9]+), timeout ([0-9]+)/.exec(text);
  const socketErrors = socket ? socket.slice(1).reduce((sum, n) => sum + Number(n), 0) : 0;
  return { rps: Number(rps), p50Ms: toMs(p50), p99Ms: toMs(p99), failures: non2xx + socketErrors };
}

async function runWrk(load: Load, ports: number[], seconds: number): Promise<Sample> {
  const script = scriptFor(load, ports);
  const args = [
    'wrk',
    `-t${ports.length}`,
    `-c${CONNECTIONS}`,
    `-d${seconds}s`,
    '--timeout',
    '5s',
    '--latency',
    ...(load.key ? ['-H', `Authorization: Bearer ${load.key}`] : []),
    ...(script ? ['-s', script] : []),
    `http://127.0.0.1:${ports[0]}${load.path}`,
  ];
  const [command, ...rest] = pinned(LOAD_CPU, args);
  const { stdout } = await promisify(execFile)(command!, rest, { timeout: (seconds + 30) * 1000 });
  return parseWrk(stdout);
}

// Fallback when wrk is not installed: autocannon in this process, which then shares the CPU.
async function runAutocannon(load: Load, ports: number[], seconds: number): Promise<Sample> {
  const create = { method: 'POST' as const, path: '/v1/pets', body: '{"name":"Rex","categoryId":7}' };
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (load.key) headers.authorization = `Bearer ${load.key}`;
  const [low, high] = load.ids ?? [1, 1];
  const randomId = () => low + Math.floor(Math.random() * (high - low + 1));
  const request =
    load.kind === 'create'
      ? create
      : load.kind === 'getPet' || load.kind === 'pages'
        ? {
            method: 'GET' as const,
            setupRequest: (r: autocannon.Request) => ({
              ...r,
              path:
                load.kind === 'getPet'
                  ? `/v1/pets/${randomId()}`
                  : `${load.path}&cursor=${encodeCursor({ afterId: BigInt(randomId()), status: undefined })}`,
            }),
          }
        : { method: 'GET' as const };
  // Each connection cycles through its requests in order: nine lists, then a create.
  const requests = load.kind === 'mix' ? [...Array<typeof request>(9).fill(request), create] : [request];
  const results = await Promise.all(
    ports.map((port) =>
      autocannon({
        url: `http://127.0.0.1:${port}${load.path}`,
        connections: Math.ceil(CONNECTIONS / ports.length),
        duration: seconds,
        headers,
        requests,
      }),
    ),
  );
  return {
    rps: results.reduce((sum, r) => sum + r.requests.average, 0),
    p50Ms: Math.max(...results.map((r) => r.latency.p50)),
    p99Ms: Math.max(...results.map((r) => r.latency.p99)),
    failures: results.reduce((sum, r) => sum + r.non2xx + r.errors + r.timeouts, 0),
  };
}

/** Drives `ports` (one wrk thread each) with `load` for `seconds`. */
export function drive(load: Load, ports: number[], seconds: number): Promise<Sample> {
  return hasWrk() ? runWrk(load, ports, seconds) : runAutocannon(load, ports, seconds);
}
