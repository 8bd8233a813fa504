// `npm run bench`: the built service against a bare node:http server, in interleaved rounds.
// Options: --pets 10000[,1000000] --rounds 3 --duration 5 --warmup 1 --quick --postgres / --no-postgres
// --node-options '<flags for the service, after those of npm start>'
import { copyFileSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { drive, hasWrk, workload, type Sample, type WorkloadName } from './load.js';
import { pinning, SHIPPED_ENV, START_FLAGS, startBare, startMinimal, startService, type Running } from './processes.js';
import { npmCommand, writeReport, type Measured, type RunInfo } from './report.js';
import { POSTGRES_URL, reachable, seedPostgres, seedSqlite, type Seeded } from './seed.js';

const SERVER_CPU = 1;

const { values: options } = parseArgs({
  options: {
    pets: { type: 'string', default: '10000' },
    rounds: { type: 'string' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    quick: { type: 'boolean', default: false },
    postgres: { type: 'boolean' },
    'no-postgres': { type: 'boolean', default: false },
    // More flags for the service's node, after those npm start gives it, e.g. --node-options=--max-semi-space-size=4.
    'node-options': { type: 'string', default: '' },
  },
});
const quick = options.quick;
const nodeFlags = options['node-options'].split(' ').filter(Boolean);
const serviceNode = { flags: [...START_FLAGS, ...nodeFlags] };
const rounds = Number(options.rounds ?? (quick ? 1 : 3));
const seconds = Number(options.duration ?? (quick ? 2 : 5));
const warmup = Number(options.warmup ?? 1);
// The 10,000-pet store is always measured: larger ones are compared with it.
const petCounts = [...new Set([10_000, ...options.pets.split(',').map(Number)])].sort((a, b) => a - b);
if (petCounts.some((n) => !Number.isInteger(n) || n < 100) || ![rounds, seconds, warmup].every((n) => n > 0)) {
  throw new Error('--pets takes whole numbers of at least 100; --rounds, --duration and --warmup positive numbers');
}

const READS: WorkloadName[] = ['list', 'filtered', 'deep', 'pages', 'getPet'];
// The extra configurations, each with one setting changed from the shipped defaults: the per-key
// limit off, to show what counting it costs, and the request log off, to show what its line costs.
const EXTRA_ENV = {
  'limit-off': { PETSTORE_RATE_LIMIT: 'off' },
  'log-warn': { LOG_LEVEL: 'warn' },
} as const;
// Reads first in a round: the writes grow the store the next round reads.
const WRITES: WorkloadName[] = ['create', 'mix'];
const ALL: WorkloadName[] = [...READS, ...WRITES];

interface Target {
  id: string;
  store: 'bare' | 'SQLite' | 'PostgreSQL';
  /**
   * What the service's environment changes from the shipped defaults, or `minimal`: not the
   * service but bench/minimal.mjs; none for the rows that judge the targets.
   */
  variant?: 'limit-off' | 'log-warn' | 'minimal';
  /** The id of the shipped row an extra row is sampled right after, and compared with. */
  base?: string;
  pets: number;
  instances: Running[];
  workloads: WorkloadName[];
  seeded?: Seeded;
  walFile?: string;
}

const temp = mkdtempSync(join(tmpdir(), 'petstore-bench-'));
const targets: Target[] = [];
const startedRss: RunInfo['startedRss'] = [];
const extras: Target[] = [];
// Each service's standard output (its request log) goes to a file of its own.
const logFile = (name: string) => join(temp, `${name}.log`);
const cleanups: (() => Promise<void>)[] = [];
const started = Date.now();
const log = (line: string) => process.stderr.write(`[bench ${((Date.now() - started) / 1000).toFixed(0)}s] ${line}\n`);

const describeSample = (bare: Sample, sample: Sample & { peakRss?: number; cpuMicros?: number }) =>
  `  ${Math.round(sample.rps)} req/s (bare just before: ${Math.round(bare.rps)}), p50 ${sample.p50Ms} ms, ` +
  `p99 ${sample.p99Ms} ms, ${sample.cpuMicros?.toFixed(0) ?? 'n/a'} µs CPU per answer, ` +
  `peak RSS ${sample.peakRss === undefined ? 'n/a' : (sample.peakRss / 1048576).toFixed(0)} MB`;

/**
 * The 10,000-pet store of the shipped row `base` served again with one setting changed
 * (`variant`), sampled after that row and the extras added before it, for each read workload:
 * the limit off shows what counting it costs, the log off what the request line costs.
 */
async function addExtra(base: string, variant: keyof typeof EXTRA_ENV, store: 'SQLite' | 'PostgreSQL', seeded: Seeded) {
  const id = `${base}-${variant}`;
  const extra = await startService(id, { ...seeded.env, ...EXTRA_ENV[variant] }, SERVER_CPU, logFile(id), serviceNode);
  // Stopped before anything else is cleaned up: a PostgreSQL schema is dropped only after.
  cleanups.unshift(extra.stop);
  extras.push({
    id,
    store,
    variant,
    base,
    pets: 10_000,
    instances: [extra],
    workloads: ['list', 'pages', 'getPet'],
    seeded,
  });
}

async function main() {
  log(
    `load from ${hasWrk() ? 'wrk' : 'autocannon (wrk not found)'}; ${pinning() ? 'pinned with taskset' : 'no taskset'}`,
  );
  for (const pets of petCounts) {
    log(`seeding SQLite with ${pets} pets`);
    const path = join(temp, `pets-${pets}.db`);
    const seeded = seedSqlite(path, pets);
    const service = await startService(
      `SQLite ${pets}`,
      seeded.env,
      SERVER_CPU,
      logFile(`sqlite-${pets}`),
      serviceNode,
    );
    cleanups.push(service.stop);
    if (pets === 10_000) startedRss.push({ name: 'the service on SQLite', bytes: service.peakRss() });
    targets.push({
      id: `sqlite-${pets}`,
      store: 'SQLite',
      pets,
      instances: [service],
      workloads: pets === 10_000 ? ALL : READS,
      seeded,
      walFile: `${path}-wal`,
    });
    if (pets === 10_000) {
      // Reads only: these other processes on the same file never write.
      await addExtra('sqlite-10000', 'limit-off', 'SQLite', seeded);
      await addExtra('sqlite-10000', 'log-warn', 'SQLite', seeded);
      // A copy of the seeded file, taken before any workload wrote to it: its creates stay apart.
      const minimalPath = join(temp, 'minimal.db');
      copyFileSync(path, minimalPath);
      const minimal = await startMinimal(minimalPath, SERVER_CPU);
      cleanups.push(minimal.stop);
      extras.push({
        id: 'minimal',
        store: 'SQLite',
        variant: 'minimal',
        base: 'sqlite-10000',
        pets,
        instances: [minimal],
        workloads: ['list', 'pages', 'getPet', 'create'],
        seeded,
      });
    }
  }

  const wantPostgres = options.postgres ?? !options['no-postgres'];
  let postgres = 'not measured (--no-postgres)';
  if (wantPostgres && (await reachable(POSTGRES_URL))) {
    log('seeding PostgreSQL with 10000 pets');
    const seeded = await seedPostgres(POSTGRES_URL, `petstore_bench_${process.pid}`, 10_000);
    cleanups.push(seeded.drop);
    const one = await startService('PostgreSQL', seeded.env, SERVER_CPU, logFile('pg-1'), serviceNode);
    cleanups.unshift(one.stop);
    targets.push({ id: 'pg-1', store: 'PostgreSQL', pets: 10_000, instances: [one], workloads: ALL, seeded });
    await addExtra('pg-1', 'limit-off', 'PostgreSQL', seeded);
    const a = await startService('PostgreSQL A', seeded.env, SERVER_CPU, logFile('pg-2a'), serviceNode);
    const b = await startService('PostgreSQL B', seeded.env, SERVER_CPU, logFile('pg-2b'), serviceNode);
    cleanups.unshift(a.stop, b.stop);
    targets.push({
      id: 'pg-2',
      store: 'PostgreSQL',
      pets: 10_000,
      instances: [a, b],
      workloads: ['list', 'create'],
      seeded,
    });
    postgres = `${POSTGRES_URL.replace(/\/\/[^@]*@/, '//')}`;
  } else if (wantPostgres) {
    if (options.postgres) throw new Error(`PostgreSQL not reachable at ${POSTGRES_URL}`);
    postgres = `not reachable at ${POSTGRES_URL.replace(/\/\/[^@]*@/, '//')}: skipped`;
  }

  // Each extra row runs after the row it is compared with, in the order added: the limit off first.
  for (const extra of extras) {
    const last = targets.findLastIndex((target) => target.id === extra.base || target.base === extra.base);
    targets.splice(last + 1, 0, extra);
  }

  // The bare server answers with the very bytes of a list page, so both send the same body size.
  const sqlite10k = targets[0]!;
  const page = await fetch(`${sqlite10k.instances[0]!.url}/v1/pets?limit=20`, {
    headers: { authorization: `Bearer ${sqlite10k.seeded!.key}` },
  });
  const body = Buffer.from(await page.arrayBuffer());
  if (page.status !== 200) throw new Error(`the service answered ${page.status} to the first list: ${body}`);
  const bodyFile = join(temp, 'page.json');
  writeFileSync(bodyFile, body);
  const bare = await startBare(bodyFile, SERVER_CPU);
  cleanups.unshift(bare.stop);
  startedRss.push({ name: 'bare node:http', bytes: bare.peakRss() });
  targets.unshift({ id: 'bare', store: 'bare', pets: 0, instances: [bare], workloads: ['list'] });

  const measure = async (
    target: Target,
    name: WorkloadName,
    duration: number,
  ): Promise<Sample & { peakRss?: number; cpuMicros?: number }> => {
    const load = workload(name, target.pets, target.seeded?.key ?? '');
    for (const instance of target.instances) instance.resetPeak();
    const cpuBefore = target.instances.reduce((sum, instance) => sum + instance.cpuMicros(), 0);
    const sample = await drive(
      load,
      target.instances.map((instance) => instance.port),
      duration,
    );
    const cpu = target.instances.reduce((sum, instance) => sum + instance.cpuMicros(), 0) - cpuBefore;
    const peaks = target.instances.map((instance) => instance.peakRss() ?? 0);
    // The server's own CPU time per answer: what the shared machine's load does not change much.
    const cpuMicros = Number.isFinite(cpu) && sample.rps > 0 ? cpu / (sample.rps * duration) : undefined;
    return { ...sample, peakRss: Math.max(...peaks) || undefined, cpuMicros };
  };

  log(`warm-up, ${warmup} s per workload`);
  for (const target of targets) for (const name of target.workloads) await measure(target, name, warmup);
  for (const target of targets) await target.seeded?.settle?.();

  // Every sample sits between two of the bare server: the ratio to their mean holds however
  // busy the machine is at that moment.
  type Measurement = Sample & { peakRss?: number; bareRps?: number; cpuMicros?: number };
  const samples = new Map<string, Measurement[]>();
  const add = (key: string, sample: Measurement) => samples.set(key, [...(samples.get(key) ?? []), sample]);
  const walSizes: number[] = [];
  const bareTarget = targets[0]!;
  let waiting: Measurement | undefined;
  const addBare = (bareSample: Measurement) => {
    add('bare|list', bareSample);
    if (waiting) waiting.bareRps = (waiting.bareRps! + bareSample.rps) / 2;
    waiting = undefined;
  };
  // Workload by workload, each on every server in turn: the same workload on the 10,000 and the
  // larger store runs back to back, so the scale comparison pairs samples taken moments apart.
  const measuredTargets = targets.slice(1);
  for (let round = 1; round <= rounds; round++) {
    const warmed = new Set<Target>();
    for (const name of ALL) {
      for (const target of measuredTargets.filter((candidate) => candidate.workloads.includes(name))) {
        // It sat idle while the others were measured: the first sample would carry its warming up.
        if (!warmed.has(target)) await measure(target, name, warmup);
        warmed.add(target);
        log(`round ${round}/${rounds}: ${target.id} ${name}`);
        const bareSample = await measure(bareTarget, 'list', seconds);
        addBare(bareSample);
        waiting = { ...(await measure(target, name, seconds)), bareRps: bareSample.rps };
        add(`${target.id}|${name}`, waiting);
        log(describeSample(bareSample, waiting));
        if (WRITES.includes(name)) await target.seeded?.settle?.();
        for (const instance of target.instances) instance.trimLog();
        if (target.walFile) walSizes.push(walSize(target.walFile));
      }
    }
  }
  addBare(await measure(bareTarget, 'list', seconds));

  const measured: Measured[] = [];
  for (const target of targets) {
    for (const name of target.workloads) {
      measured.push({
        target: target.id,
        store: target.store,
        variant: target.variant,
        pets: target.pets,
        instances: target.instances.length,
        workload: name,
        samples: samples.get(`${target.id}|${name}`)!,
      });
    }
  }
  const sqliteTargets = targets.filter((target) => target.store === 'SQLite' && !target.variant);
  const info: RunInfo = {
    command: npmCommand('bench'),
    rounds,
    seconds,
    warmup,
    loadGenerator: hasWrk() ? 'wrk' : 'autocannon',
    pinned: pinning(),
    postgres,
    nodeFlags,
    env: SHIPPED_ENV,
    walEnd: sqliteTargets.map((target) => ({ pets: target.pets, bytes: walSize(target.walFile!) })),
    walMax: Math.max(0, ...walSizes),
    startedRss,
    storedAtEnd: sqliteTargets.map((target) => ({ pets: target.pets, stored: countStored(target) })),
    bodyBytes: body.length,
    startedAt: new Date(started),
    minutes: (Date.now() - started) / 60_000,
  };
  for (const target of targets) {
    for (const instance of target.instances) {
      if (instance.child.exitCode !== null) throw new Error(`${instance.name} exited:\n${instance.output()}`);
    }
  }
  const files = writeReport(measured, info);
  log(`wrote ${files.join(', ')}`);
}

function walSize(file: string): number {
  try {
    return statSync(file).size;
  } catch {
    return 0;
  }
}

function countStored(target: Target): number {
  const db = new Database(target.walFile!.replace(/-wal$/, ''), { readonly: true });
  try {
    return Number(db.prepare('SELECT count(*) FROM pets').pluck().get());
  } finally {
    db.close();
  }
}

try {
  await main();
} finally {
  for (const cleanup of cleanups) await cleanup().catch((error: Error) => log(`cleanup: ${error.message}`));
  rmSync(temp, { recursive: true, force: true });
}
