import { cpus } from 'node:os';
import { readFileSync, writeFileSync } from 'node:fs';
import { CACHE_BYTES } from '../src/pets/page-cache.js';
import { CONNECTIONS, type Sample } from './load.js';
import { ROOT } from './processes.js';

const READS = ['list', 'filtered', 'deep', 'pages', 'getPet'];

export interface Measured {
  target: string;
  store: 'bare' | 'SQLite' | 'PostgreSQL';
  pets: number;
  instances: number;
  /**
   * An extra row's name (bench/run.ts, EXTRAS), or `minimal`: the reference row
   * (bench/minimal.mjs); none for the service as shipped, the rows the targets judge.
   */
  variant?: string;
  /** An extra row's change from the shipped defaults, in words, for its heading. */
  setting?: string;
  workload: string;
  /** Each with the mean req/s of the bare GET samples just before and after it (none for the bare server's own). */
  samples: (Sample & { peakRss?: number; bareRps?: number; cpuMicros?: number })[];
}

/** One minute of the --soak run: the 90/10 mix on the shipped SQLite service. */
export interface SoakMinute extends Sample {
  /** Seconds since the soak began, at the end of this minute. */
  endSeconds: number;
  /** Peak RSS during the minute (VmHWM, reset before it), bytes. */
  peakRss: number | undefined;
  /** RSS at the end of the minute (VmRSS), bytes. */
  rss: number | undefined;
}

export interface RunInfo {
  command: string;
  rounds: number;
  seconds: number;
  warmup: number;
  loadGenerator: string;
  pinned: boolean;
  postgres: string;
  /** How the service was started, from the project's root: `npm start`'s command. */
  startCommand: string;
  /** What the bench set in the service's environment beyond the database and port. */
  env: Record<string, string>;
  walEnd: { pets: number; bytes: number }[];
  walMax: number;
  /** Peak RSS of a server from its start until it first answered, before any load (VmHWM). */
  startedRss: { name: string; bytes: number | undefined }[];
  storedAtEnd: { pets: number; stored: number }[];
  bodyBytes: number;
  startedAt: Date;
  minutes: number;
  /** The --soak run's minutes, when one ran. */
  soak?: SoakMinute[];
  /** The events row: webhook delivery to a local receiver, per store (bench/events.ts). */
  events?: EventsRun[];
  /** The backlog measure: the service's RSS with events waiting for a hanging receiver, per store. */
  backlog?: BacklogRun[];
  /**
   * The row with one replica (bench/run.ts, replicaRow): the reads its service sent the primary
   * and the replica over the run, or why it was not measured.
   */
  replica?: { primaryReads: number; replicaReads: number } | string;
  /** The relay's measures (bench/relay.ts): idle latency, hanging endpoints, pace, the drain after an outage. */
  relay?: RelayRuns;
}

/** Idle latency (bench/relay.ts, runIdle): pets created one at a time, each 201 to its delivery. */
export interface IdleRun {
  store: 'SQLite' | 'PostgreSQL';
  /** Services sharing the store; the pets are created on the first. */
  instances: number;
  count: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
}

/** Hanging endpoints beside a healthy one (bench/relay.ts, runHanging). */
export interface HangingRun {
  store: 'SQLite' | 'PostgreSQL';
  /** Endpoints at a receiver that never answers, each owed `backlog` events. */
  hanging: number;
  backlog: number;
  /** New pets, created `gapMs` apart, and each one's 201 to its delivery at the healthy endpoint. */
  count: number;
  gapMs: number;
  p50Ms: number;
  maxMs: number;
  /** Attempts the hanging receiver had got by the end. */
  held: number;
}

/** Deliveries a second to one fast receiver (bench/relay.ts, runThroughput). */
export interface ThroughputRun {
  store: 'SQLite' | 'PostgreSQL';
  instances: number;
  events: number;
  /** From the first delivery to the last. */
  seconds: number;
  perSecond: number;
  /** The services' CPU time per second of it, summed over the instances. */
  cpuShare: number;
  /** The relays' time in store calls (claims, outcomes) per second of it, summed over the instances. */
  storeShare: number;
  duplicates: number;
}

/** The drain after an outage (bench/relay.ts, runOutage). */
export interface OutageRun {
  store: 'SQLite' | 'PostgreSQL';
  outageSeconds: number;
  /** Pets created during the outage. */
  waiting: number;
  /** PETSTORE_WEBHOOK_RETRY_MS. */
  retryMs: number;
  /** From the first success after the outage to the last of them delivered. */
  drainMs: number;
  /** Events that arrived before an older one. */
  outOfOrder: number;
  /** Attempts the receiver answered 503. */
  failedAttempts: number;
}

export interface RelayRuns {
  idle: IdleRun[];
  hanging: HangingRun[];
  throughput: ThroughputRun[];
  outage: OutageRun[];
}

/** The relay's targets (docs/webhooks.md#the-relay), judged on each run of the report. */
export const RELAY_TARGETS = {
  /** One SQLite instance: 201 to an idle receiver's delivery. */
  idleSqlite: { p50Ms: 50, maxMs: 250 },
  /** Two PostgreSQL instances, created on one, delivered by either. */
  idlePostgres: { p50Ms: 100 },
  /** A healthy endpoint's new events beside any number of hanging ones. */
  hangingMaxMs: 1000,
  /** One fast receiver, one SQLite instance. */
  sqlitePerSecond: 3000,
  /** From the first success after an outage to the last event waiting delivered. */
  outageDrainMs: 2000,
};

/**
 * The service's memory with a backlog (bench/events.ts, runBacklog): one endpoint at a receiver
 * that never answers; no event waiting, then `few` written into the store, then `events` in all.
 */
export interface BacklogRun {
  store: 'SQLite' | 'PostgreSQL';
  /** Events written while the receiver hung: `few` first, then the rest up to `events`. */
  events: number;
  few: number;
  /** RSS readings per phase, one a second. */
  readings: number;
  /** Seconds each phase with events waiting ran before its readings. */
  settleSeconds: number;
  /** petstore_webhook_events_waiting at the end of each phase. */
  waitingNone: number;
  waitingFew: number;
  waitingSeen: number;
  /** Deliveries the receiver got (and held) by the end. */
  attempts: number;
  /** Median RSS (VmRSS) over each phase's readings, bytes. */
  rssNone: number | undefined;
  rssFew: number | undefined;
  rssWaiting: number | undefined;
  /** Peak RSS (VmHWM) from the writing of the rest to the end, bytes. */
  peakWaiting: number | undefined;
}

/** Webhook delivery on one store while creates run at a steady rate (bench/events.ts). */
export interface EventsRun {
  store: 'SQLite' | 'PostgreSQL';
  /** Creates a second asked for, and how long. */
  rate: number;
  seconds: number;
  /** 201s, and the creates a second they make (first sent to last 201). */
  created: number;
  madeRate: number;
  /** Creates that did not get a 201. */
  failed: number;
  /** Events of those 201s delivered, each counted once; further deliveries of one. */
  delivered: number;
  duplicates: number;
  /** 201s whose event had not arrived when the run stopped waiting. */
  missing: number;
  /** Events first delivered from the first create sent to the last 201, a second. */
  deliveredRate: number;
  /** From the last 201 to the last event's first delivery; NaN when some never arrived. */
  drainMs: number;
  /** From a 201 to its event's first delivery. */
  lagP50Ms: number;
  lagP99Ms: number;
}

interface Figures {
  rps: number;
  ratio: number;
  p50Ms: number;
  p99Ms: number;
  peakRss: number | undefined;
  failures: number;
  /** Server CPU time per answer, µs. */
  cpuMicros: number | undefined;
}

const MB = 1024 * 1024;

// The targets of the service as shipped, each judged on the figures of one run.
export const TARGETS = {
  /**
   * SQLite, 10,000 pets: the service's req/s over the reference row's (bench/minimal.mjs) on the
   * same workload, both synchronous=FULL. The first page is above 1 because the service sends it
   * from its page cache, where the reference reads it from the database on every request.
   */
  reference: { getPet: 0.63, pages: 0.8, list: 1.5, create: 3 } as Record<string, number>,
  /** PostgreSQL, one instance: req/s over bare node:http GET's. */
  postgres: { list: 0.4, getPet: 0.5, create: 0.3 } as Record<string, number>,
  /** Peak RSS of the worst workload of the shipped SQLite rows. */
  rssBytes: 256 * MB,
  /** A larger store (--pets) against the 10,000-pet one, read workloads. */
  scale: 0.8,
  walBytes: 16 * MB,
  /** What counting the per-key rate limit may cost, against the same store with the limit off. */
  limitCost: 0.05,
  /** --soak: the last minute's peak RSS over the first warm minute's may grow by this share at most. */
  soakGrowth: 0.1,
};
export const SUMMARY_START = '<!-- bench-summary:start -->';
export const SUMMARY_END = '<!-- bench-summary:end -->';
/** The pages that show the latest run's summary between the markers, copied there by each run. */
export const SUMMARY_PAGES = ['docs/benchmark.md', 'bench/README.md'];

const LABELS: Record<string, string> = {
  list: 'list, limit 20',
  filtered: 'list, status filter',
  deep: 'list, cursor near the end',
  pages: 'list, random page',
  getPet: 'getPet, random id',
  create: 'createPet',
  mix: '90% list / 10% create',
};

/** The npm command that ran this script with its arguments, quoted for a POSIX shell: what reproduces a report. */
export function npmCommand(script: string): string {
  const quoted = (arg: string) => (/[\s'"$`\\]/.test(arg) ? `'${arg.replaceAll("'", "'\\''")}'` : arg);
  const args = process.argv.slice(2).map(quoted).join(' ');
  return args ? `npm run ${script} -- ${args}` : `npm run ${script}`;
}

/** `date` to the minute, as reports print it: 2026-11-25 22:29. */
export const utcMinute = (date: Date) => date.toISOString().slice(0, 16).replace('T', ' ');

export function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
}

type MeasuredSample = Measured['samples'][number];

/** A sample's req/s over the mean of the bare GET samples around it (`bareRps` when it has none). */
const toBare = (sample: MeasuredSample, bareRps = NaN) => sample.rps / (sample.bareRps ?? bareRps);

/** The median of each sample's ratio to the bare GET samples around it. */
const ratioOf = (measured: Measured, bareRps: number) => median(measured.samples.map((s) => toBare(s, bareRps)));

/**
 * One row's figure over another's, sampled in the same rounds: the median over the rounds of
 * each round's pair, each sample first divided by the bare samples around it. The run takes the
 * two one after the other, so a round's pair shares the machine's load of that moment.
 */
export function pairedRatio(base: Pick<Measured, 'samples'>, other: Pick<Measured, 'samples'>): number {
  return median(other.samples.map((sample, i) => toBare(sample) / toBare(base.samples[i]!)));
}

function summarise(measured: Measured, bareRps: number): Figures {
  const rps = median(measured.samples.map((s) => s.rps));
  const peaks = measured.samples.map((s) => s.peakRss).filter((p): p is number => p !== undefined);
  const cpus = measured.samples.map((s) => s.cpuMicros).filter((c): c is number => c !== undefined);
  return {
    rps,
    ratio: ratioOf(measured, bareRps),
    p50Ms: median(measured.samples.map((s) => s.p50Ms)),
    p99Ms: median(measured.samples.map((s) => s.p99Ms)),
    peakRss: peaks.length ? Math.max(...peaks) : undefined,
    cpuMicros: cpus.length ? median(cpus) : undefined,
    failures: measured.samples.reduce((sum, s) => sum + s.failures, 0),
  };
}

/** The configuration the shipped rows ran with, in words and settings. */
const shippedAs = (info: RunInfo) =>
  [
    'request logs at `info` (the default `LOG_LEVEL`) written to a file',
    `per-key rate limit counted${info.env.PETSTORE_RATE_LIMIT ? ` with its ceiling out of reach (\`PETSTORE_RATE_LIMIT=${info.env.PETSTORE_RATE_LIMIT}\`)` : ''}`,
    'refused-key limit and metrics at their defaults',
  ].join(', ');

const int = (n: number) => Math.round(n).toLocaleString('en-US');
const ms = (n: number) => (n < 10 ? n.toFixed(2) : n.toFixed(1));
/** Bytes as MB with `digits` decimals; n/a when unknown. */
export const mib = (bytes: number | undefined, digits = 0) =>
  bytes === undefined ? 'n/a' : `${(bytes / MB).toFixed(digits)} MB`;
const mark = (ok: boolean) => (ok ? 'met' : '**not met**');
/** p99 ÷ p50, or NaN when p50 reads 0: autocannon reports whole milliseconds, so a p50 under 1 ms gives no ratio. */
export const tailOf = ({ p50Ms, p99Ms }: { p50Ms: number; p99Ms: number }) => (p50Ms > 0 ? p99Ms / p50Ms : NaN);
const times = (n: number) => (Number.isNaN(n) ? 'n/a' : n.toFixed(1));

function table(rows: { label: string; figures: Figures }[]): string[] {
  return [
    '| workload | req/s | ÷ bare GET | p50 ms | p99 ms | p99 ÷ p50 | peak RSS | CPU µs per answer | failed |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      ({ label, figures: f }) =>
        `| ${label} | ${int(f.rps)} | ${f.ratio.toFixed(2)} | ${ms(f.p50Ms)} | ${ms(f.p99Ms)} | ${times(tailOf(f))} | ${mib(f.peakRss)} | ${f.cpuMicros === undefined ? 'n/a' : f.cpuMicros.toFixed(0)} | ${f.failures} |`,
    ),
  ];
}

/**
 * The peak RSS target is judged on every workload of the service as shipped on SQLite, at every
 * store size measured: the worst of them; the worst p99 ÷ p50 is given beside it, as
 * information. Extra rows and the reference row are not judged.
 */
export function worstOfShippedSqlite(
  rows: (Pick<Measured, 'store' | 'variant'> & { figures: Pick<Figures, 'p50Ms' | 'p99Ms' | 'peakRss'> })[],
): { worstTail: number; peakRss: number } {
  const judged = rows.filter((row) => row.store === 'SQLite' && row.variant === undefined);
  return {
    worstTail: Math.max(...judged.map((row) => tailOf(row.figures))),
    peakRss: Math.max(...judged.map((row) => row.figures.peakRss ?? 0)),
  };
}

export interface ReferenceRatio {
  workload: string;
  serviceRps: number;
  referenceRps: number;
  /** The service over the reference row, round by round (pairedRatio). */
  ratio: number;
  target: number;
  met: boolean;
}

/**
 * The shipped SQLite service (10,000 pets) over the reference row, for each workload that has a
 * target (TARGETS.reference) and was measured on both.
 */
export function referenceRatios(measured: Measured[]): ReferenceRatio[] {
  const find = (target: string, workload: string) =>
    measured.find((m) => m.target === target && m.workload === workload);
  return Object.entries(TARGETS.reference).flatMap(([workload, target]) => {
    const service = find('sqlite-10000', workload);
    const reference = find('minimal', workload);
    if (!service || !reference) return [];
    const ratio = pairedRatio(reference, service);
    return [
      {
        workload,
        serviceRps: median(service.samples.map((s) => s.rps)),
        referenceRps: median(reference.samples.map((s) => s.rps)),
        ratio,
        target,
        met: ratio >= target,
      },
    ];
  });
}

/** The --soak run's first warm minute against its last: the growth of the peak RSS between them. */
export function soakGrowth(minutes: Pick<SoakMinute, 'peakRss'>[]): {
  first: number;
  last: number;
  growth: number;
  met: boolean;
} {
  const first = minutes[0]?.peakRss ?? NaN;
  const last = minutes.at(-1)?.peakRss ?? NaN;
  const growth = last / first - 1;
  return { first, last, growth, met: growth <= TARGETS.soakGrowth };
}

const orNa = (n: number) => (Number.isNaN(n) ? 'n/a' : int(n));

/** The events row's table (a heading-less block of the report), one line per store. */
export function renderEvents(runs: EventsRun[]): string[] {
  return [
    '| store | creates/s asked (made) | delivered events/s while creating | drain after the last 201 | lag p50 ms | lag p99 ms | delivered | duplicates | missing | failed creates |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
    // SQLite's rows first, then PostgreSQL's, each in the order run.
    ...[...runs.filter((r) => r.store === 'SQLite'), ...runs.filter((r) => r.store !== 'SQLite')].map(
      (r) =>
        `| ${r.store} | ${int(r.rate)} (${int(r.madeRate)}) | ${int(r.deliveredRate)} | ${Number.isNaN(r.drainMs) ? 'not drained' : `${int(r.drainMs)} ms`} | ${orNa(r.lagP50Ms)} | ${orNa(r.lagP99Ms)} | ${int(r.delivered)} of ${int(r.created)} | ${r.duplicates} | ${r.missing} | ${r.failed} |`,
    ),
  ];
}

/**
 * The row with one replica: its table, and the primary's share of its reads (every read the
 * service made there, warm-up included); or the note saying why it was not measured.
 */
export function renderReplica(rows: Parameters<typeof table>[0], replica: RunInfo['replica']): string[] {
  const title = '### PostgreSQL, 10,000 pets, one instance reading from one streaming replica';
  if (typeof replica === 'string' || replica === undefined || rows.length === 0) {
    return typeof replica === 'string' && replica !== 'measured' ? ['', title, '', `${replica}.`] : [];
  }
  const { primaryReads, replicaReads } = replica;
  const share = primaryReads / (primaryReads + replicaReads);
  return [
    '',
    title,
    '',
    "A primary and a streaming replica of it, both on this machine, made by the run with PostgreSQL's own `initdb` and `pg_basebackup -R` (`bench/pg-cluster.ts`: 16 MB of shared buffers, `fsync` off), not the server of the rows above; `DATABASE_READ_URLS` names the replica. Reads only, compared with no row: the replica takes CPU from the same two cores.",
    '',
    ...table(rows),
    '',
    `Reads of the animals sent to the primary: ${int(primaryReads)} of ${int(primaryReads + replicaReads)} (${(share * 100).toFixed(1)}%), the rest to the replica (\`petstore_primary_reads_total\` and \`petstore_replica_reads_total\` at the end of the run, warm-up included).`,
  ];
}

/** `to` against `from` in MB with one decimal, signed; a change that rounds to 0.0 has no sign. */
function delta(to: number | undefined, from: number | undefined): string {
  if (to === undefined || from === undefined) return 'n/a';
  const shown = mib(Math.abs(to - from), 1);
  return shown === '0.0 MB' ? shown : `${to < from ? '−' : '+'}${shown}`;
}

/** The backlog measure's table, one line per store. */
export function renderBacklog(runs: BacklogRun[]): string[] {
  const [few, events] = [int(runs[0]?.few ?? 0), int(runs[0]?.events ?? 0)];
  return [
    `| store | service RSS, none waiting | ${few} waiting | ${events} waiting | ${events} against ${few} | against none | peak | waiting per /metrics | attempts held |`,
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|',
    ...runs.map(
      (r) =>
        `| ${r.store} | ${mib(r.rssNone, 1)} | ${mib(r.rssFew, 1)} | ${mib(r.rssWaiting, 1)} | ${delta(r.rssWaiting, r.rssFew)} | ${delta(r.rssWaiting, r.rssNone)} | ${mib(r.peakWaiting, 1)} | ${int(r.waitingNone)}, ${int(r.waitingFew)}, ${int(r.waitingSeen)} | ${int(r.attempts)} |`,
    ),
  ];
}

/** Whether an idle run meets its target, in words; a dash for a run without one (PostgreSQL, one instance). */
function idleTarget(run: IdleRun): string {
  if (run.store === 'SQLite') {
    const { p50Ms, maxMs } = RELAY_TARGETS.idleSqlite;
    return `p50 ≤ ${p50Ms}, max ≤ ${maxMs}: ${mark(run.p50Ms <= p50Ms && run.maxMs <= maxMs)}`;
  }
  if (run.instances < 2) return '—';
  return `p50 ≤ ${RELAY_TARGETS.idlePostgres.p50Ms}: ${mark(run.p50Ms <= RELAY_TARGETS.idlePostgres.p50Ms)}`;
}

/** The relay's measures, each a sub-section of the events section with its table. */
export function renderRelay({ idle, hanging, throughput, outage }: RelayRuns): string[] {
  const lines: string[] = [];
  if (idle.length) {
    lines.push(
      '',
      '### Woken by each commit: an idle receiver',
      '',
      `Pets created one at a time, ${idle[0]!.count} per row with a pause between, each 201 to its delivery at \`bench/receiver.mjs\` (idle between them); with two PostgreSQL instances, created on the first, delivered by whichever relay leases it (docs/webhooks.md#the-relay).`,
      '',
      '| store | instances | pets | p50 ms | p99 ms | max ms | target |',
      '|---|---:|---:|---:|---:|---:|---|',
      ...idle.map(
        (r) =>
          `| ${r.store} | ${r.instances} | ${int(r.count)} | ${orNa(r.p50Ms)} | ${orNa(r.p99Ms)} | ${orNa(r.maxMs)} | ${idleTarget(r)} |`,
      ),
    );
  }
  if (hanging.length) {
    lines.push(
      '',
      '### Endpoints that hang beside a healthy one',
      '',
      `One healthy endpoint, up; then endpoints at a \`bench/receiver.mjs\` that never answers (the shipped timeout, 10 s, each attempt then retried), each owed a backlog written into the store; once the healthy one has the backlog, ${hanging[0]!.count} pets created ${hanging[0]!.gapMs} ms apart: each 201 to its delivery at the healthy endpoint (docs/webhooks.md#isolation).`,
      '',
      '| store | endpoints hanging | events each owed | new pets | lag p50 ms | lag max ms | attempts held by the hanging receiver | within 1 s |',
      '|---|---:|---:|---:|---:|---:|---:|---|',
      ...hanging.map(
        (r) =>
          `| ${r.store} | ${int(r.hanging)} | ${int(r.backlog)} | ${int(r.count)} | ${orNa(r.p50Ms)} | ${orNa(r.maxMs)} | ${int(r.held)} | ${mark(r.maxMs < RELAY_TARGETS.hangingMaxMs)} |`,
      ),
    );
  }
  if (throughput.length) {
    lines.push(
      '',
      '### Pace: one fast receiver',
      '',
      `Events written straight into the store, delivered to \`bench/receiver.mjs\` answering 204 at once: deliveries a second from the first to the last. Per second of it, the services' CPU time (summed over the instances: 1.00 is a core busy throughout) and the relays' time in store calls (leases and outcomes, from \`/metrics\`): where the CPU share is well below 1 and the store share is high, the store is the limit (docs/webhooks.md#pace).`,
      '',
      '| store | instances | events | deliveries/s | service CPU per second | store calls per second | duplicates | target |',
      '|---|---:|---:|---:|---:|---:|---:|---|',
      ...throughput.map(
        (r) =>
          `| ${r.store} | ${r.instances} | ${int(r.events)} | ${int(r.perSecond)} | ${r.cpuShare.toFixed(2)} s | ${r.storeShare.toFixed(2)} s | ${r.duplicates} | ${r.store === 'SQLite' && r.instances === 1 ? `≥ ${int(RELAY_TARGETS.sqlitePerSecond)}: ${mark(r.perSecond >= RELAY_TARGETS.sqlitePerSecond)}` : '—'} |`,
      ),
    );
  }
  if (outage.length) {
    lines.push(
      '',
      '### After an outage',
      '',
      `\`bench/receiver.mjs\` answers 503 for ${outage[0]!.outageSeconds} s, ${int(outage[0]!.waiting)} pets created meanwhile, then 204 (\`PETSTORE_WEBHOOK_RETRY_MS=${outage[0]!.retryMs}\`): from the first success to the last of them delivered. The endpoint is probed on its back-off, and its first success releases everything waiting (docs/webhooks.md#back-off-per-endpoint). "Out of order": events that arrived before an older one (attempts in flight side by side).`,
      '',
      '| store | outage | events waiting | first success to the last delivered | out of order | attempts answered 503 | within 2 s |',
      '|---|---:|---:|---:|---:|---:|---|',
      ...outage.map(
        (r) =>
          `| ${r.store} | ${r.outageSeconds} s | ${int(r.waiting)} | ${int(r.drainMs)} ms | ${r.outOfOrder} | ${int(r.failedAttempts)} | ${mark(r.drainMs <= RELAY_TARGETS.outageDrainMs)} |`,
      ),
    );
  }
  return lines;
}

/** The report's pages: bench/results/latest.md, chart.svg, and the summary the other pages copy. */
export function renderReport(measured: Measured[], info: RunInfo): { latest: string; chart: string; summary: string } {
  const bare = measured.find((m) => m.store === 'bare')!;
  const bareRps = median(bare.samples.map((s) => s.rps));
  const find = (target: string, workload: string) =>
    measured.find((m) => m.target === target && m.workload === workload);
  const figures = (target: string, workload: string) => {
    const found = find(target, workload);
    return found && summarise(found, bareRps);
  };
  const summarised = measured.map((m) => ({ ...m, figures: summarise(m, bareRps) }));
  const rowsOf = (target: string) =>
    summarised
      .filter((m) => m.target === target)
      .map((m) => ({ label: target === 'bare' ? 'bare node:http GET' : LABELS[m.workload]!, figures: m.figures }));

  const worst = worstOfShippedSqlite(summarised);
  const { worstTail } = worst;
  // The soak is the shipped SQLite service under the mix too: its minutes count for the peak.
  const peakRss = Math.max(worst.peakRss, ...(info.soak ?? []).map((minute) => minute.peakRss ?? 0));
  const larger = [...new Set(measured.filter((m) => m.store === 'SQLite' && m.pets > 10_000).map((m) => m.pets))];
  const walEnd = Math.max(0, ...info.walEnd.map((w) => w.bytes));
  const cpu = cpus();
  const machine = `${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown CPU'}, Node ${process.version}`;

  const references = referenceRatios(measured);
  const referenceLines = references.length
    ? [
        'Ratio to the reference row (`bench/minimal.mjs`: Fastify and better-sqlite3 doing the same SQL on a copy of the same file, nothing else), same workload, same run:',
        '',
        '| workload | service req/s | reference req/s | service ÷ reference | target | |',
        '|---|---:|---:|---:|---:|---|',
        ...references.map(
          (r) =>
            `| ${LABELS[r.workload]}${r.workload === 'create' ? ' (both synchronous=FULL)' : ''} | ${int(r.serviceRps)} | ${int(r.referenceRps)} | ${r.ratio.toFixed(2)} | ≥ ${r.target.toFixed(2)} | ${mark(r.met)} |`,
        ),
        '',
      ]
    : [];

  const postgresChecks = Object.entries(TARGETS.postgres).flatMap(([workload, goal]) => {
    const found = figures('pg-1', workload);
    if (!found) return [];
    return [
      `| PostgreSQL, one instance: ${LABELS[workload]} ÷ bare GET ≥ ${goal.toFixed(2)} | ${found.ratio.toFixed(2)} | ${mark(found.ratio >= goal)} |`,
    ];
  });
  // The limit's cost: 1 − the median over the rounds of the shipped sample over the limit-off one taken just after it.
  const limitChecks = measured
    .filter((m) => m.variant === 'limit-off')
    .map((off) => {
      const shipped = find(off.target.replace(/-limit-off$/, ''), off.workload)!;
      const cost = 1 - pairedRatio(off, shipped);
      return `| ${off.store}: counting the rate limit costs ≤ ${TARGETS.limitCost * 100}% (${LABELS[off.workload]}) | ${(cost * 100).toFixed(1)}% | ${mark(cost <= TARGETS.limitCost)} |`;
    });
  const soak = info.soak && soakGrowth(info.soak);
  const checks: string[] = [
    `| peak RSS ≤ ${mib(TARGETS.rssBytes)} (worst workload of the shipped SQLite rows${info.soak ? ', the soak included' : ''}) | ${mib(peakRss)} | ${mark(peakRss <= TARGETS.rssBytes)} |`,
    soak
      ? `| RSS flat over ${int(info.soak!.at(-1)!.endSeconds)} s of the 90/10 mix once warm: last minute's peak ≤ first's + ${TARGETS.soakGrowth * 100}% | ${mib(soak.first)} → ${mib(soak.last)} (${soak.growth >= 0 ? '+' : ''}${(soak.growth * 100).toFixed(1)}%) | ${mark(soak.met)} |`
      : '| RSS flat over a 10-minute 90/10 mix once warm | not run here: `npm run bench -- --soak 600` | |',
    `| WAL bounded (≤ ${mib(TARGETS.walBytes)} at any point) | ${mib(info.walMax)} max, ${mib(walEnd)} at the end | ${mark(info.walMax <= TARGETS.walBytes)} |`,
    ...postgresChecks,
    ...limitChecks,
  ];
  const scaleLines: string[] = [];
  for (const pets of larger) {
    scaleLines.push(
      '',
      `### SQLite, ${int(pets)} pets against 10,000 pets`,
      '',
      `| workload | 10,000: req/s (÷ bare GET) | ${int(pets)}: req/s (÷ bare GET) | ${int(pets)} ÷ 10,000 |`,
      '|---|---:|---:|---:|',
    );
    for (const workload of READS) {
      const base = figures('sqlite-10000', workload)!;
      const big = figures(`sqlite-${pets}`, workload)!;
      const ratio = pairedRatio(find('sqlite-10000', workload)!, find(`sqlite-${pets}`, workload)!);
      scaleLines.push(
        `| ${LABELS[workload]} | ${int(base.rps)} (${base.ratio.toFixed(2)}) | ${int(big.rps)} (${big.ratio.toFixed(2)}) | ${ratio.toFixed(2)} |`,
      );
      checks.push(
        `| ${LABELS[workload]} at ${int(pets)} pets ≥ ${TARGETS.scale}× its 10,000 figure | ${ratio.toFixed(2)} | ${mark(ratio >= TARGETS.scale)} |`,
      );
    }
    scaleLines.push('', ...table(rowsOf(`sqlite-${pets}`)));
  }

  const summary = [
    SUMMARY_START,
    `Run of ${utcMinute(info.startedAt)} UTC (\`${info.command}\`, ${info.minutes.toFixed(1)} minutes) on ${machine}, a shared machine. SQLite, 10,000 pets, ${CONNECTIONS} connections, ${info.rounds} interleaved ${info.seconds} s round${info.rounds === 1 ? '' : 's'} (medians); the service as shipped: \`${info.startCommand}\`, ${shippedAs(info)}.`,
    '',
    ...table([...rowsOf('bare'), ...rowsOf('sqlite-10000')]),
    '',
    ...referenceLines,
    '| target | measured | |',
    '|---|---:|---|',
    ...checks,
    '',
    Number.isNaN(worstTail)
      ? "Worst p99 ÷ p50 of the shipped SQLite rows, as information: n/a (a p50 under autocannon's 1 ms resolution)."
      : `Worst p99 ÷ p50 of the shipped SQLite rows, as information: ${worstTail.toFixed(1)}×.`,
    SUMMARY_END,
  ];

  const postgresLines: string[] = [];
  for (const [target, title] of [
    ['pg-1', 'one instance'],
    ['pg-2', 'two instances sharing the database'],
  ] as const) {
    const rows = rowsOf(target);
    if (rows.length) postgresLines.push('', `### PostgreSQL, 10,000 pets, ${title}`, '', ...table(rows));
  }
  postgresLines.push(...renderReplica(rowsOf('pg-replica'), info.replica));
  const extraLines: string[] = [];
  const minimalRows = rowsOf('minimal');
  if (minimalRows.length) {
    extraLines.push(
      '',
      '### Reference row, not the service: minimal Fastify + better-sqlite3 (`bench/minimal.mjs`), SQLite, 10,000 pets',
      '',
      'One route per operation with its JSON schema and one prepared statement, the SQL of the service\'s SQLite store, a copy of the same seeded file, `synchronous=FULL`; no key check, rate limit, request log, metrics, page cache or group commit (one fsync per create). "list, limit 20" is read from the database on every request here.',
      '',
      ...table(minimalRows),
    );
  }
  for (const target of [...new Set(measured.filter((m) => m.setting !== undefined).map((m) => m.target))]) {
    const row = measured.find((m) => m.target === target)!;
    const title = row.store === 'SQLite' ? 'SQLite, 10,000 pets' : 'PostgreSQL, 10,000 pets, one instance';
    extraLines.push(
      '',
      `### Extra row, not the shipped service: ${title}, ${row.setting}`,
      '',
      ...table(rowsOf(target)),
    );
  }

  const eventLines: string[] = [];
  if (info.events?.length || info.backlog?.length || info.relay) {
    eventLines.push('', '## Events: webhook delivery to a local receiver');
  }
  if (info.events?.length) {
    const rates = [...new Set(info.events.map((run) => int(run.rate)))].join(' and ');
    eventLines.push(
      '',
      `The service as shipped on a store of its own (10,000 pets), with \`PETSTORE_WEBHOOK_ALLOW_HTTP=127.0.0.1\` and one endpoint added with \`petstore webhooks add\`: \`bench/receiver.mjs\`, on loopback, answering 204 at once. Creates at a steady ${rates} a second, ${info.events[0]!.seconds} s each (after a warm-up of the same rate, delivered and not counted), each 201 matched with its event's first delivery by the pet's id. "Delivered events/s while creating": events first delivered from the first create to the last 201, a second; "drain": from the last 201 to the last event's delivery; "lag": from a 201 to its event's delivery (each commit wakes the relay: docs/webhooks.md#the-relay).`,
      '',
      ...renderEvents(info.events),
    );
  }
  if (info.backlog?.length) {
    eventLines.push(
      '',
      `### Memory with ${int(info.backlog[0]!.events)} events waiting for a receiver that hangs`,
      '',
      `The service as shipped on a store of its own, one endpoint at \`bench/receiver.mjs\` answering no delivery (each attempt held until the service's timeout, then retried). Its RSS is read once a second for ${info.backlog[0]!.readings} s, \`/metrics\` scraped each second throughout: with no event waiting; with ${int(info.backlog[0]!.few)} written into the store, the relay holding its attempt (an endpoint that has not answered holds one slot, then is probed on its back-off); with ${int(info.backlog[0]!.events)} in all; each phase with events waiting ${info.backlog[0]!.settleSeconds} s before its readings, the attempts timing out and retried meanwhile. The medians, and the peak from the last writing on. What the backlog itself costs is "${int(info.backlog[0]!.events)} against ${int(info.backlog[0]!.few)}"; against none, the relay at work counts too. The relay hands out a bounded batch of events per endpoint and keeps only the attempts in flight in memory (docs/webhooks.md#the-relay).`,
      '',
      ...renderBacklog(info.backlog),
    );
  }
  if (info.relay) eventLines.push(...renderRelay(info.relay));

  const soakLines: string[] = [];
  if (info.soak) {
    soakLines.push(
      '',
      `## RSS over ${int(info.soak.at(-1)!.endSeconds)} s of the 90/10 mix (\`--soak\`)`,
      '',
      'The shipped SQLite service (10,000 pets, warm from the rounds before), driven by the 90/10 mix without a pause in runs of a minute; its peak RSS reset before each minute. "Flat" compares the last minute\'s peak with the first\'s.',
      '',
      '| minute ending at | req/s | p99 ms | peak RSS | RSS at its end | failed |',
      '|---:|---:|---:|---:|---:|---:|',
      ...info.soak.map(
        (m) =>
          `| ${m.endSeconds} s | ${int(m.rps)} | ${ms(m.p99Ms)} | ${mib(m.peakRss)} | ${mib(m.rss)} | ${m.failures} |`,
      ),
    );
  }

  const lines = [
    '# Benchmark: latest run',
    '',
    `Written by \`${info.command}\` on ${utcMinute(info.startedAt)} UTC in ${info.minutes.toFixed(1)} minutes. How to run it and read it: [bench/README.md](../README.md).`,
    '',
    `- Machine: ${machine}; shared, so absolute figures are noisy: read the ratios.`,
    `- Load: ${info.loadGenerator}, ${CONNECTIONS} connections${info.pinned ? ', pinned to CPU 0 with the servers on CPU 1 (taskset)' : ', not pinned (no taskset)'}; ${info.warmup} s warm-up per workload, then ${info.rounds} round${info.rounds === 1 ? '' : 's'}, each running every workload in turn on every server for ${info.seconds} s between samples of ${info.seconds} s of the bare server (each server warmed for ${info.warmup} s before its first sample of a round).`,
    `- **As shipped**: ${shippedAs(info)}; started as \`${info.startCommand}\`, as \`npm start\` runs it, with no node flags; API key checked on every request, validation, int64-exact JSON, \`Link\` headers, \`synchronous=FULL\`.`,
    `- Ratios: "÷ bare GET" is the median over the rounds of a sample's req/s over the mean of the bare GET samples just before and just after it (\`bench/bare.mjs\`, the same ${info.bodyBytes}-byte page; median ${int(bareRps)} req/s). "service ÷ reference" and the limit's cost pair the two rows' samples of each round (the extra and reference rows run right after the shipped one) and give the median of the rounds' quotients; so does a larger store against the 10,000 one.`,
    `- **Page cache**: on SQLite, a listPets page that another animal follows never changes, and is sent again from memory (src/pets/page-cache.ts). "list, limit 20", "status filter" and "cursor near the end" ask for one page over and over, so they measure that path, key check included; "random page" asks for the page after a random stored id, mostly one not kept (at most ${int(CACHE_BYTES / info.bodyBytes)} pages of this size, against about 10,000 different ones), read from the database. PostgreSQL keeps no pages.`,
    '- "failed": responses that were not 2xx, plus socket errors, summed over the rounds. "CPU µs per answer": the server process\'s user and system CPU time during the sample over the answers it sent (median), from `/proc/<pid>/stat`, kernel loopback work included.',
    `- Stores at the end: ${info.storedAtEnd.map((s) => `${int(s.stored)} pets in the store seeded with ${int(s.pets)}`).join('; ')} (createPet and the mix add to the 10,000 store). WAL file at the end: ${info.walEnd.map((w) => `${mib(w.bytes)} (${int(w.pets)})`).join(', ')}; largest seen after any workload: ${mib(info.walMax)}.`,
    `- Memory before any load (peak RSS from start until the first answer): ${info.startedRss.map((r) => `${r.name} ${mib(r.bytes)}`).join(', ')}.`,
    '- **Events written**: every create of the service, in the createPet and 90/10 rows, writes its `pet.created` event in the transaction that stores the pet (the outbox: docs/events.md), so those rows, and their targets against the reference row (SQLite) and bare node:http (PostgreSQL), are measured with events written; the reference row writes none. No webhook endpoint is added on those stores (their relays have nothing to send); delivery is measured apart, in "Events" below.',
    `- PostgreSQL: ${info.postgres}; after its write workloads the run does \`VACUUM ANALYZE\`, a \`CHECKPOINT\` and a \`sync\`, so that work does not fall in a later sample.`,
    '',
    '## Summary',
    '',
    ...summary,
    ...scaleLines,
    ...postgresLines,
    ...extraLines,
    ...eventLines,
    ...soakLines,
    '',
    '![Throughput as a share of bare node:http GET](chart.svg)',
    '',
  ];
  return { latest: lines.join('\n'), chart: drawChart(measured, bareRps), summary: summary.join('\n') };
}

/**
 * Writes bench/results/latest.md and chart.svg, and the summary into each of SUMMARY_PAGES
 * between its markers; returns the files written.
 */
export function writeReport(measured: Measured[], info: RunInfo): string[] {
  const { latest, chart, summary } = renderReport(measured, info);
  const dir = `${ROOT}bench/results/`;
  writeFileSync(`${dir}latest.md`, latest);
  writeFileSync(`${dir}chart.svg`, chart);
  const written = [`${dir}latest.md`, `${dir}chart.svg`];
  for (const page of SUMMARY_PAGES) {
    const path = `${ROOT}${page}`;
    const text = readFileSync(path, 'utf8');
    const start = text.indexOf(SUMMARY_START);
    const end = text.indexOf(SUMMARY_END);
    if (start >= 0 && end > start) {
      writeFileSync(path, text.slice(0, start) + summary + text.slice(end + SUMMARY_END.length));
      written.push(path);
    }
  }
  return written;
}

const escape = (text: string) => text.replace(/&/g, '&amp;').replace(/</g, '&lt;');

/** Horizontal bars: each workload's req/s as a share of bare GET, one bar per store. */
function drawChart(measured: Measured[], bareRps: number): string {
  const series = [
    { target: 'sqlite-10000', label: 'SQLite, 10,000 pets', color: '#2f6fb3' },
    ...[...new Set(measured.filter((m) => m.store === 'SQLite' && m.pets > 10_000).map((m) => m.pets))].map((pets) => ({
      target: `sqlite-${pets}`,
      label: `SQLite, ${int(pets)} pets`,
      color: '#7fb0e0',
    })),
    { target: 'minimal', label: 'reference row (minimal.mjs)', color: '#9a9a9a' },
    { target: 'pg-1', label: 'PostgreSQL, one instance', color: '#d08a2e' },
  ].filter((s) => measured.some((m) => m.target === s.target));
  const workloads = ['list', 'filtered', 'deep', 'pages', 'getPet', 'create', 'mix'];
  const bar = 14;
  const groupHeight = series.length * bar + 12;
  const left = 190;
  const width = 760;
  const plot = width - left - 60;
  const top = 60;
  const height = top + workloads.length * groupHeight + 40;
  const x = (ratio: number) => left + Math.min(ratio, 1.1) * (plot / 1.1);
  const parts = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#fff"/>`,
    `<text x="10" y="20" font-size="14" font-weight="bold">Throughput as a share of bare node:http GET (${int(bareRps)} req/s, same run)</text>`,
    ...series.map(
      (s, i) =>
        `<rect x="${10 + i * 185}" y="32" width="12" height="12" fill="${s.color}"/><text x="${26 + i * 185}" y="42">${escape(s.label)}</text>`,
    ),
  ];
  parts.push(
    `<line x1="${x(1)}" y1="${top - 6}" x2="${x(1)}" y2="${height - 30}" stroke="#999" stroke-dasharray="4 3"/>`,
    `<text x="${x(1)}" y="${height - 16}" text-anchor="middle" fill="#555">bare GET</text>`,
  );
  workloads.forEach((workload, g) => {
    const y0 = top + g * groupHeight;
    parts.push(
      `<text x="${left - 8}" y="${y0 + (series.length * bar) / 2 + 4}" text-anchor="end">${escape(LABELS[workload]!)}</text>`,
    );
    series.forEach((s, i) => {
      const found = measured.find((m) => m.target === s.target && m.workload === workload);
      if (!found) return;
      const ratio = ratioOf(found, bareRps);
      const y = y0 + i * bar;
      parts.push(
        `<rect x="${left}" y="${y}" width="${(x(ratio) - left).toFixed(1)}" height="${bar - 2}" fill="${s.color}"/>`,
        `<text x="${(x(ratio) + 4).toFixed(1)}" y="${y + bar - 4}">${ratio.toFixed(2)}</text>`,
      );
    });
  });
  parts.push('</svg>', '');
  return parts.join('\n');
}
