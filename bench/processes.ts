import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  closeSync,
  existsSync,
  fstatSync,
  openSync,
  readFileSync,
  readSync,
  statSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export const ROOT = new URL('..', import.meta.url).pathname;
const MAIN = `${ROOT}dist/main.js`;

/**
 * The command `npm start` runs (package.json), from the project's root: plain node, no flags, the
 * service's defaults. The bench starts the service with it, so it measures the service as shipped.
 */
export const START_COMMAND = ['node', 'dist/main.js', 'serve'] as const;

const hasTaskset = spawnSync('taskset', ['--version']).status === 0;

/** The command that runs `argv` on CPU `cpu` when taskset exists (so wrk and the server never share a core). */
export function pinned(cpu: number | undefined, argv: string[]): string[] {
  return hasTaskset && cpu !== undefined ? ['taskset', '-c', String(cpu), ...argv] : argv;
}

export const pinning = () => hasTaskset;

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export interface Running {
  name: string;
  port: number;
  url: string;
  child: ChildProcess;
  output: () => string;
  /** Peak resident set since the last resetPeak, in bytes (Linux VmHWM). */
  peakRss: () => number | undefined;
  /** Resident set now, in bytes (Linux VmRSS). */
  rss: () => number | undefined;
  resetPeak: () => void;
  /** Empties the log file once it is large, as a collector's rotation would (the service appends). */
  trimLog: () => void;
  /** CPU time (user and system) the process has used so far, in microseconds. */
  cpuMicros: () => number;
  stop: () => Promise<void>;
}

async function waitUntilUp(url: string, child: ChildProcess, output: () => string) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`exited with ${child.exitCode}:\n${output()}`);
    try {
      await fetch(url);
      return;
    } catch {
      await sleep(100);
    }
  }
  throw new Error(`did not answer at ${url} within 30 s:\n${output()}`);
}

const LOG_TRIM_BYTES = 256 << 20;

// /proc/<pid>/stat counts in clock ticks of 1/100 s on Linux.
const TICK_MICROS = 10_000;

function readCpu(pid: number | undefined): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) * TICK_MICROS;
  } catch {
    return NaN;
  }
}

function readStatus(pid: number | undefined, field: 'VmHWM' | 'VmRSS'): number | undefined {
  try {
    const kib = new RegExp(`${field}:\\s+([0-9]+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
    return kib === undefined ? undefined : Number(kib) * 1024;
  } catch {
    return undefined;
  }
}

/** Starts `argv` with `env`, pinned to `cpu`, and resolves once `probe` (a path) answers. */
export async function startProcess(
  name: string,
  argv: string[],
  env: Record<string, string>,
  { cpu, port, probe, logFile }: { cpu?: number; port: number; probe: string; logFile?: string },
): Promise<Running> {
  const [command, ...args] = pinned(cpu, argv);
  // Standard output to a file, as a log collector reads it: the server pays for every write.
  const logFd = logFile === undefined ? undefined : openSync(logFile, 'a');
  // taskset execs its command, so the pid is the server's own.
  const child = spawn(command!, args, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', logFd ?? 'pipe', 'pipe'],
  });
  if (logFd !== undefined) closeSync(logFd);
  let text = '';
  child.stdout?.on('data', (chunk) => (text = (text + chunk).slice(-20_000)));
  child.stderr!.on('data', (chunk) => (text = (text + chunk).slice(-20_000)));
  const output = () => (logFile === undefined ? text : `${text}\n${tail(logFile, 20_000)}`);
  const url = `http://127.0.0.1:${port}`;
  await waitUntilUp(url + probe, child, output);
  return {
    name,
    port,
    url,
    child,
    output,
    peakRss: () => readStatus(child.pid, 'VmHWM'),
    rss: () => readStatus(child.pid, 'VmRSS'),
    cpuMicros: () => readCpu(child.pid),
    // Linux: writing 5 to clear_refs resets the peak RSS (VmHWM) to the current RSS.
    resetPeak: () => {
      if (existsSync(`/proc/${child.pid}/clear_refs`)) writeFileSync(`/proc/${child.pid}/clear_refs`, '5');
    },
    trimLog: () => {
      if (logFile !== undefined && statSync(logFile).size > LOG_TRIM_BYTES) truncateSync(logFile);
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 12_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** The last `bytes` of `file`, as text. */
function tail(file: string, bytes: number): string {
  const fd = openSync(file, 'r');
  try {
    const { size } = fstatSync(fd);
    const buffer = Buffer.alloc(Math.min(bytes, size));
    readSync(fd, buffer, 0, buffer.length, size - buffer.length);
    return buffer.toString('utf8');
  } finally {
    closeSync(fd);
  }
}

/**
 * What the service's environment adds to npm start's defaults in the bench: the per-key rate
 * limit counted as always, with a ceiling no workload reaches, so nothing is refused. Every
 * other setting is the default: request logs at `info`, refused-key limit, metrics.
 */
export const SHIPPED_ENV: Record<string, string> = { PETSTORE_RATE_LIMIT: '1000000000' };

/**
 * Another build's main file, or node flags, for `npm run bench:compare`'s variants and
 * `npm run bench:profile`'s profiler; the rows `npm run bench` judges use neither.
 */
export interface ServiceNode {
  flags?: string[];
  main?: string;
}

/**
 * The built service as `npm start` runs it (START_COMMAND), with its defaults (SHIPPED_ENV)
 * unless `env` says otherwise; its request log goes to `logFile`.
 */
export async function startService(
  name: string,
  env: Record<string, string>,
  cpu: number | undefined,
  logFile: string,
  { flags = [], main = MAIN }: ServiceNode = {},
): Promise<Running> {
  const port = await freePort();
  const [node, , ...args] = START_COMMAND;
  return startProcess(
    name,
    [node, ...flags, main, ...args],
    { PORT: String(port), ...SHIPPED_ENV, ...env },
    { cpu, port, probe: '/healthz', logFile },
  );
}

/** One of the bench's own plain-JavaScript servers (`bench/<script>`), on bare node. */
async function startScript(
  name: string,
  script: string,
  env: Record<string, string>,
  probe: string,
  cpu: number | undefined,
  flags: string[] = [],
): Promise<Running> {
  const port = await freePort();
  return startProcess(
    name,
    ['node', ...flags, `${ROOT}bench/${script}`],
    { PORT: String(port), ...env },
    { cpu, port, probe },
  );
}

/**
 * bench/minimal.mjs on the SQLite file at `path`: the reference row (see that file). `flags` are
 * node's, for `npm run bench:profile`'s profiler; the rows `npm run bench` judges use none.
 */
export const startMinimal = (path: string, cpu: number | undefined, flags: string[] = []) =>
  startScript('minimal Fastify + better-sqlite3', 'minimal.mjs', { PETSTORE_DB: path }, '/v1/pets/1', cpu, flags);

/** bench/bare.mjs answering every GET with the bytes of `bodyFile`: the ceiling every ratio divides by. */
export const startBare = (bodyFile: string, cpu: number | undefined) =>
  startScript('bare node:http', 'bare.mjs', { BODY_FILE: bodyFile }, '/', cpu);

/** bench/otlp-sink.mjs: an OTLP/HTTP collector that discards what it is sent, for the tracing row. */
export const startOtlpSink = (cpu: number | undefined) => startScript('OTLP sink', 'otlp-sink.mjs', {}, '/', cpu);

/**
 * bench/receiver.mjs: a webhook receiver that answers 204 and records each delivery, for the
 * events row; `hang`: it answers none, for the backlog measure.
 */
export const startReceiver = (cpu: number | undefined, { hang = false }: { hang?: boolean } = {}) =>
  startScript('webhook receiver', 'receiver.mjs', hang ? { RECEIVER: 'hang' } : {}, '/count', cpu);

/** One delivery as bench/receiver.mjs recorded it: when, the event's id and the pet's, and the status it answered. */
export interface Delivered {
  at: number;
  id: string | null;
  pet: string | null;
  status?: number | null;
}

/** The deliveries the receiver at `receiverUrl` has recorded, in the order they came. */
export async function deliveriesAt(receiverUrl: string): Promise<Delivered[]> {
  const text = await (await fetch(`${receiverUrl}/deliveries`)).text();
  return text ? text.split('\n').map((line) => JSON.parse(line) as Delivered) : [];
}

/** Runs `petstore <args>` to completion and returns its standard output. */
export function runPetstore(args: string[], env: Record<string, string>): string {
  const result = spawnSync('node', [MAIN, ...args], {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'warn', ...env },
    encoding: 'utf8',
  });
  if (result.status !== 0) throw new Error(`petstore ${args.join(' ')} failed:\n${result.stderr}`);
  return result.stdout;
}
