// `npm run bench`: the built service, as `npm start` runs it, against a bare node:http server and
// the reference row (bench/minimal.mjs), in interleaved rounds. bench/README.md is the runbook.
// Options: --pets 10000[,1000000] --rounds 3 --duration 5 --warmup 1 --quick --postgres / --no-postgres
// --soak <seconds>: then the 90/10 mix on the shipped SQLite service for that long, RSS every minute.
// --events-rate 250,1000: creates a second of the events rows (webhook delivery, bench/events.ts), each
// store's backlog measure and the relay's measures (bench/relay.ts) after them; 0: none of them.
// --relay idle,hanging,throughput,outage --hanging 30,1000 --throughput 30000 --outage 8: which relay
// measures, and their sizes (none: no relay measure).
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { BACKLOG_EVENTS, onEachStore, relayPlan, runBacklog, runEvents } from './events.js';
import { drive, hasWrk, workload, type Sample, type WorkloadName } from './load.js';
import {
  pinning,
  SHIPPED_ENV,
  START_COMMAND,
  startBare,
  startMinimal,
  startOtlpSink,
  startService,
  type Running,
} from './processes.js';
import {
  mib,
  npmCommand,
  writeReport,
  type BacklogRun,
  type EventsRun,
  type Measured,
  type RelayRuns,
  type RunInfo,
  type SoakMinute,
} from './report.js';
import { clusterMissing, startPair } from './pg-cluster.js';
import { RELAY_PLAN, runRelayMeasures } from './relay.js';
import { POSTGRES_URL, reachable, seedPostgres, seedSqlite, storeFor, type Seeded } from './seed.js';

const SERVER_CPU = 1;
// The events row's receiver runs where wrk does: no wrk runs then.
const RECEIVER_CPU = 0;

const { values: options } = parseArgs({
  options: {
    pets: { type: 'string', default: '10000' },
    rounds: { type: 'string' },
    duration: { type: 'string' },
    warmup: { type: 'string' },
    quick: { type: 'boolean', default: false },
    postgres: { type: 'boolean' },
    'no-postgres': { type: 'boolean', default: false },
    // Seconds of the 90/10 mix on the shipped SQLite service after the rounds, RSS read every minute.
    soak: { type: 'string' },
    'events-rate': { type: 'string', default: '250,1000' },
    relay: { type: 'string', default: RELAY_PLAN.measures.join(',') },
    hanging: { type: 'string', default: RELAY_PLAN.hanging.join(',') },
    throughput: { type: 'string', default: String(RELAY_PLAN.throughputEvents) },
    outage: { type: 'string', default: String(RELAY_PLAN.outageSeconds) },
  },
});
const quick = options.quick;
const soakSeconds = options.soak === undefined ? 0 : Number(options.soak);
const rounds = Number(options.rounds ?? (quick ? 1 : 3));
const seconds = Number(options.duration ?? (quick ? 2 : 5));
const warmup = Number(options.warmup ?? 1);
// The 10,000-pet store is always measured: larger ones are compared with it.
const petCounts = [...new Set([10_000, ...options.pets.split(',').map(Number)])].sort((a, b) => a - b);
if (petCounts.some((n) => !Number.isInteger(n) || n < 100) || ![rounds, seconds, warmup].every((n) => n > 0)) {
  throw new Error('--pets takes whole numbers of at least 100; --rounds, --duration and --warmup positive numbers');
}
// Two whole minutes at least: the first warm minute and the last one are compared.
if (options.soak !== undefined && !(Number.isInteger(soakSeconds) && soakSeconds >= 120)) {
  throw new Error('--soak takes whole seconds, at least 120');
}
const SOAK_MINUTE = 60;
const eventsRates = options['events-rate'].split(',').map(Number);
const relayMeasures = relayPlan(options);
if (!eventsRates.every((rate) => rate >= 0)) {
  throw new Error('--events-rate takes creates a second, comma-separated, 0 for no events row');
}

const READS: WorkloadName[] = ['list', 'filtered', 'deep', 'pages', 'getPet'];

/**
 * The extra rows: the shipped service on the same store with its environment changed as `env`
 * says, sampled right after the shipped row (in this order) on the read workloads, and reported
 * apart under `setting`, judged against no target but the limit's cost (`limit-off`). Another
 * row is one more entry here. `collector`: OTEL_EXPORTER_OTLP_ENDPOINT names a local OTLP
 * collector that discards what it is sent (bench/otlp-sink.mjs), started for the first such row.
 */
const EXTRAS: {
  variant: string;
  setting: string;
  env: Record<string, string>;
  stores: Target['store'][];
  /** The workloads it runs; the first page, a random page and getPet when not given. */
  workloads?: WorkloadName[];
  collector?: boolean;
}[] = [
  {
    variant: 'limit-off',
    setting: 'per-key rate limit off (`PETSTORE_RATE_LIMIT=off`)',
    env: { PETSTORE_RATE_LIMIT: 'off' },
    stores: ['SQLite', 'PostgreSQL'],
  },
  {
    variant: 'log-warn',
    setting: 'request log off (`LOG_LEVEL=warn`: no line per request)',
    env: { LOG_LEVEL: 'warn' },
    stores: ['SQLite'],
  },
  {
    variant: 'tracing',
    setting: 'tracing on (`OTEL_EXPORTER_OTLP_ENDPOINT`: every request traced, spans sent to a local collector)',
    env: {},
    collector: true,
    stores: ['SQLite'],
  },
];
// Reads first in a round: the writes grow the store the next round reads.
const WRITES: WorkloadName[] = ['create', 'mix'];
const ALL: WorkloadName[] = [...READS, ...WRITES];

interface Target {
  id: string;
  store: 'bare' | 'SQLite' | 'PostgreSQL';
  /**
   * An extra row's name (EXTRAS), or `minimal`: not the service but bench/minimal.mjs; none for
   * the service as shipped.
   */
  variant?: string;
  /** An extra row's change from the shipped defaults, in words. */
  setting?: string;
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

let sink: Running | undefined;

/** The collector of the rows that send traces, started once; stopped after them. */
async function otlpSink(): Promise<Running> {
  if (!sink) {
    sink = await startOtlpSink(undefined);
    cleanups.push(sink.stop);
  }
  return sink;
}

/** The extra rows (EXTRAS) of `store`. */
const extrasOf = (store: 'SQLite' | 'PostgreSQL') => EXTRAS.filter((extra) => extra.stores.includes(store));

/**
 * Every extra row (EXTRAS) of `store`, beside the shipped row `base`, on the 10,000-pet store
 * `storeOf` gives each (SQLite: a copy of the seeded file, taken before the shipped service
 * opened it, since one process serves a SQLite file).
 */
async function addExtras(base: string, store: 'SQLite' | 'PostgreSQL', storeOf: (id: string) => Seeded) {
  for (const { variant, setting, env, workloads, collector } of extrasOf(store)) {
    const id = `${base}-${variant}`;
    const seeded = storeOf(id);
    const traced: Record<string, string> = collector ? { OTEL_EXPORTER_OTLP_ENDPOINT: (await otlpSink()).url } : {};
    const extra = await startService(id, { ...seeded.env, ...env, ...traced }, SERVER_CPU, logFile(id));
    // Stopped before anything else is cleaned up: a PostgreSQL schema is dropped only after.
    cleanups.unshift(extra.stop);
    extras.push({
      id,
      store,
      variant,
      setting,
      base,
      pets: 10_000,
      instances: [extra],
      workloads: workloads ?? ['list', 'pages', 'getPet'],
      seeded,
    });
  }
}

async function main() {
  log(
    `load from ${hasWrk() ? 'wrk' : 'autocannon (wrk not found)'}; ${pinning() ? 'pinned with taskset' : 'no taskset'}`,
  );
  for (const pets of petCounts) {
    log(`seeding SQLite with ${pets} pets`);
    const path = join(temp, `pets-${pets}.db`);
    const seeded = seedSqlite(path, pets);
    // The other servers of this store, each on a copy taken before any server opened the file:
    // the extra rows, and the reference row (whose creates then stay apart from the service's).
    const copies = new Map(
      (pets === 10_000 ? [...extrasOf('SQLite').map(({ variant }) => `sqlite-10000-${variant}`), 'minimal'] : []).map(
        (id) => [id, storeFor(seeded, join(temp, `${id}.db`))],
      ),
    );
    const service = await startService(`SQLite ${pets}`, seeded.env, SERVER_CPU, logFile(`sqlite-${pets}`));
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
      await addExtras('sqlite-10000', 'SQLite', (id) => copies.get(id)!);
      const minimal = await startMinimal(copies.get('minimal')!.env.PETSTORE_DB!, SERVER_CPU);
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
    const one = await startService('PostgreSQL', seeded.env, SERVER_CPU, logFile('pg-1'));
    cleanups.unshift(one.stop);
    targets.push({ id: 'pg-1', store: 'PostgreSQL', pets: 10_000, instances: [one], workloads: ALL, seeded });
    await addExtras('pg-1', 'PostgreSQL', () => seeded);
    const a = await startService('PostgreSQL A', seeded.env, SERVER_CPU, logFile('pg-2a'));
    const b = await startService('PostgreSQL B', seeded.env, SERVER_CPU, logFile('pg-2b'));
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

  let replicaNote = 'not measured (--no-postgres)';
  if (wantPostgres) {
    const row = await replicaRow();
    if (typeof row === 'string') replicaNote = row;
    else {
      targets.push(row);
      replicaNote = 'measured';
    }
  }

  // Each extra row, and the reference row, runs after the row it is compared with, in the order added.
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

  const { events, backlog, relay } = eventsRates.some((rate) => rate > 0)
    ? await eventsRun(targets.some((target) => target.id === 'pg-1'))
    : { events: undefined, backlog: undefined, relay: undefined };
  const soak = soakSeconds > 0 ? await soakRun(targets.find((target) => target.id === 'sqlite-10000')!) : undefined;
  const replicaTarget = targets.find((target) => target.id === 'pg-replica');
  const replication = replicaTarget ? await readsByServer(replicaTarget) : undefined;

  const measured: Measured[] = [];
  for (const target of targets) {
    for (const name of target.workloads) {
      measured.push({
        target: target.id,
        store: target.store,
        variant: target.variant,
        setting: target.setting,
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
    startCommand: START_COMMAND.join(' '),
    env: SHIPPED_ENV,
    walEnd: sqliteTargets.map((target) => ({ pets: target.pets, bytes: walSize(target.walFile!) })),
    walMax: Math.max(0, ...walSizes),
    startedRss,
    storedAtEnd: sqliteTargets.map((target) => ({ pets: target.pets, stored: countStored(target) })),
    bodyBytes: body.length,
    startedAt: new Date(started),
    minutes: (Date.now() - started) / 60_000,
    soak,
    events,
    backlog,
    replica: replication ?? replicaNote,
    relay,
  };
  for (const target of targets) {
    for (const instance of target.instances) {
      if (instance.child.exitCode !== null) throw new Error(`${instance.name} exited:\n${instance.output()}`);
    }
  }
  const files = writeReport(measured, info);
  log(`wrote ${files.join(', ')}`);
}

/**
 * The events rows: on a SQLite store of its own, and a PostgreSQL schema of its own when
 * PostgreSQL was measured, one `seconds × rounds` run of creates at each --events-rate.
 * Then each store's backlog measure (bench/events.ts, runBacklog), on a store of its own too, and
 * the relay's measures (bench/relay.ts), each on stores of their own.
 * Their own stores: every service on a store runs a relay, and the shipped rows' have no endpoint.
 */
async function eventsRun(
  postgres: boolean,
): Promise<{ events: EventsRun[]; backlog: BacklogRun[]; relay: RelayRuns | undefined }> {
  const runs: EventsRun[] = [];
  const options = { seconds: seconds * rounds, warmup, serverCpu: SERVER_CPU, receiverCpu: RECEIVER_CPU };
  for (const rate of eventsRates.filter((rate) => rate > 0)) {
    runs.push(
      ...(await onEachStore({ folder: temp, name: `events-${rate}`, postgres }, (store, seeded) => {
        log(`events: ${store}, ${rate} creates a second for ${options.seconds} s, delivered to a local receiver`);
        return runEvents(store, seeded, { ...options, rate, logFile: logFile(`events-${store}-${rate}`) });
      })),
    );
  }
  for (const run of runs) {
    log(
      `  ${run.store}, ${run.rate}/s: ${Math.round(run.deliveredRate)} events/s delivered while creating ` +
        `(${Math.round(run.madeRate)} creates/s), drained ${run.drainMs.toFixed(0)} ms after the last 201, ` +
        `lag p50 ${run.lagP50Ms} ms, p99 ${run.lagP99Ms} ms, ${run.missing} missing, ${run.duplicates} duplicates, ` +
        `${run.failed} failed creates`,
    );
  }
  const backlogOptions = { serverCpu: SERVER_CPU, receiverCpu: RECEIVER_CPU };
  const backlog = await onEachStore({ folder: temp, name: 'backlog', postgres }, (store, seeded) => {
    log(`events: ${store}, the service's RSS with ${BACKLOG_EVENTS} events waiting for a receiver that hangs`);
    return runBacklog(store, seeded, { ...backlogOptions, logFile: logFile(`backlog-${store}`) });
  });
  for (const run of backlog) {
    log(
      `  ${run.store} backlog: RSS ${mib(run.rssNone, 1)} with none waiting, ${mib(run.rssFew, 1)} with ${run.waitingFew}, ` +
        `${mib(run.rssWaiting, 1)} with ${run.waitingSeen} (peak ${mib(run.peakWaiting, 1)}), ${run.attempts} attempts held`,
    );
  }
  const plan = relayMeasures;
  const relay = plan.measures.length
    ? await runRelayMeasures(plan, (name, run) => onEachStore({ folder: temp, name, postgres }, run), {
        ...backlogOptions,
        logFile: (name) => logFile(`relay-${name}`),
        log,
      })
    : undefined;
  return { events: runs, backlog, relay };
}

/**
 * The row with one replica: the shipped service on a primary and a streaming replica of it, both
 * started here with PostgreSQL's own tools (bench/pg-cluster.ts), 10,000 pets seeded on the
 * primary, `DATABASE_READ_URLS` naming the replica. Its reads only: it is compared with no row, and
 * tells how fast reads are with a replica and how many still reach the primary. A note instead
 * when PostgreSQL's programs are missing.
 */
async function replicaRow(): Promise<Target | string> {
  const missing = clusterMissing();
  if (missing) return `not measured: ${missing}`;
  log('starting a PostgreSQL primary and a streaming replica of it, seeding 10000 pets');
  const pair = await startPair();
  cleanups.push(pair.remove);
  const seeded = await seedPostgres(pair.primary.url, `petstore_bench_${process.pid}`, 10_000);
  await pair.caughtUp(60_000);
  const readUrl = new URL(pair.replica.url);
  readUrl.search = new URL(seeded.env.DATABASE_URL!).search;
  const env = { ...seeded.env, DATABASE_READ_URLS: readUrl.href };
  const service = await startService('PostgreSQL, one replica', env, SERVER_CPU, logFile('pg-replica'));
  cleanups.unshift(service.stop);
  // Its first checks take a tenth of a second: the warm-up would read the primary until then.
  const deadline = Date.now() + 10_000;
  while (!/"state":"in_use"/.test(await (await fetch(`${service.url}/readyz`)).text())) {
    if (Date.now() > deadline) throw new Error(`the replica was not in use within 10 s:\n${service.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return {
    id: 'pg-replica',
    store: 'PostgreSQL',
    variant: 'replica',
    pets: 10_000,
    instances: [service],
    workloads: ['list', 'pages', 'getPet'],
    seeded,
  };
}

/** The reads the row's service sent the primary and the replica over the whole run, from its /metrics. */
async function readsByServer(target: Target): Promise<{ primaryReads: number; replicaReads: number }> {
  const response = await fetch(`${target.instances[0]!.url}/metrics`, {
    headers: { authorization: `Bearer ${target.seeded!.key}` },
  });
  const text = await response.text();
  const total = (pattern: RegExp) => [...text.matchAll(pattern)].reduce((sum, match) => sum + Number(match[1]), 0);
  return {
    primaryReads: total(/^petstore_primary_reads_total ([0-9]+)$/gm),
    replicaReads: total(/^petstore_replica_reads_total\{[^}]*\} ([0-9]+)$/gm),
  };
}

/**
 * The 90/10 mix on `target`'s service for --soak seconds, in runs of a minute (the last one
 * shorter when the seconds are not whole minutes), its peak RSS reset before each and read after
 * it, with its RSS at the end of it: whether memory stays flat once warm.
 */
async function soakRun(target: Target): Promise<SoakMinute[]> {
  const service = target.instances[0]!;
  const load = workload('mix', target.pets, target.seeded!.key);
  const minutes: SoakMinute[] = [];
  for (let done = 0; done < soakSeconds; done += SOAK_MINUTE) {
    const seconds = Math.min(SOAK_MINUTE, soakSeconds - done);
    service.resetPeak();
    const sample = await drive(load, [service.port], seconds);
    minutes.push({ ...sample, endSeconds: done + seconds, peakRss: service.peakRss(), rss: service.rss() });
    log(
      `soak ${done + seconds}/${soakSeconds} s: ${Math.round(sample.rps)} req/s, p99 ${sample.p99Ms} ms, ` +
        `peak RSS ${((service.peakRss() ?? 0) / 1048576).toFixed(0)} MB`,
    );
    service.trimLog();
    if (service.child.exitCode !== null) throw new Error(`${service.name} exited:\n${service.output()}`);
  }
  return minutes;
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
