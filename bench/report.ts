import { cpus } from 'node:os';
import { readFileSync, writeFileSync } from 'node:fs';
import { CACHE_BYTES } from '../src/pets/page-cache.js';
import { CONNECTIONS, type Sample } from './load.js';
import { ROOT, START_FLAGS } from './processes.js';

export interface Measured {
  target: string;
  store: 'bare' | 'SQLite' | 'PostgreSQL';
  pets: number;
  instances: number;
  /** An extra configuration, or the minimal reference (bench/minimal.mjs), shown apart; none for the service as shipped. */
  variant?: 'limit-off' | 'log-warn' | 'minimal';
  workload: string;
  /** Each with the mean req/s of the bare GET samples just before and after it (none for the bare server's own). */
  samples: (Sample & { peakRss?: number; bareRps?: number; cpuMicros?: number })[];
}

export interface RunInfo {
  command: string;
  rounds: number;
  seconds: number;
  warmup: number;
  loadGenerator: string;
  pinned: boolean;
  postgres: string;
  nodeFlags: string[];
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

// The targets of the service as shipped, each checked against the same run's figures: ratios
// to bare node:http GET by workload, per store.
export const TARGETS = {
  sqlite: { list: 0.9, pages: 0.4, getPet: 0.55, create: 0.5, mix: 0.6 } as Record<string, number>,
  postgres: { list: 0.2, getPet: 0.3, create: 0.15 } as Record<string, number>,
  tail: 5,
  rssBytes: 100 * 1024 * 1024,
  scale: 0.8,
  walBytes: 16 << 20,
  /** What counting the per-key rate limit may cost, against the same store with the limit off. */
  limitCost: 0.05,
};
export const SUMMARY_START = '<!-- bench-summary:start -->';
export const SUMMARY_END = '<!-- bench-summary:end -->';

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
 * The larger store's figure over the 10,000-pet store's: the median over the rounds of the two
 * samples of one round, each a ratio to the bare samples around it. The run takes the two back
 * to back, so a round's pair shares the machine's load of that moment.
 */
export function scaleRatio(base: Pick<Measured, 'samples'>, big: Pick<Measured, 'samples'>): number {
  return median(big.samples.map((sample, i) => toBare(sample) / toBare(base.samples[i]!)));
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
const mib = (bytes: number | undefined) => (bytes === undefined ? 'n/a' : `${(bytes / 1048576).toFixed(0)} MB`);
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
 * The p99 ÷ p50 and peak RSS targets are judged on every workload of the service as shipped on
 * SQLite, at every store size: the worst of them. Extra configurations and the minimal
 * reference are not judged.
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

/** Writes bench/results/latest.md and chart.svg, and the summary into docs/benchmark.md; returns the files written. */
export function writeReport(measured: Measured[], info: RunInfo): string[] {
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

  const { worstTail, peakRss } = worstOfShippedSqlite(summarised);
  const larger = [...new Set(measured.filter((m) => m.store === 'SQLite' && m.pets > 10_000).map((m) => m.pets))];
  const walEnd = Math.max(0, ...info.walEnd.map((w) => w.bytes));

  const ratioChecks = (store: string, target: string, goals: Record<string, number>) =>
    Object.entries(goals).flatMap(([workload, goal]) => {
      const found = figures(target, workload);
      if (!found) return [];
      const note = workload === 'create' && store === 'SQLite' ? ' (synchronous=FULL)' : '';
      return [
        `| ${store}: ${LABELS[workload]} ÷ bare GET ≥ ${goal.toFixed(2)}${note} | ${found.ratio.toFixed(2)} | ${mark(found.ratio >= goal)} |`,
      ];
    });
  // The limit's cost: 1 − the median over the rounds of the shipped sample over the limit-off one taken just after it.
  const limitChecks = measured
    .filter((m) => m.variant === 'limit-off')
    .map((off) => {
      const shipped = find(off.target.replace(/-limit-off$/, ''), off.workload)!;
      const cost = 1 - scaleRatio(off, shipped);
      return `| ${off.store}: counting the rate limit costs ≤ ${TARGETS.limitCost * 100}% (${LABELS[off.workload]}) | ${(cost * 100).toFixed(1)}% | ${mark(cost <= TARGETS.limitCost)} |`;
    });
  const checks: string[] = [
    ...ratioChecks('SQLite', 'sqlite-10000', TARGETS.sqlite),
    Number.isNaN(worstTail)
      ? `| p99 ≤ ${TARGETS.tail}× p50 (worst SQLite workload, every store size) | n/a | **not measured**: a p50 under autocannon's 1 ms resolution; install wrk |`
      : `| p99 ≤ ${TARGETS.tail}× p50 (worst SQLite workload, every store size) | ${worstTail.toFixed(1)}× | ${mark(worstTail <= TARGETS.tail)} |`,
    `| peak RSS ≤ 100 MB (SQLite, every store size) | ${mib(peakRss)} | ${mark(peakRss <= TARGETS.rssBytes)} |`,
    `| WAL bounded (≤ 16 MB at any point) | ${mib(info.walMax)} max, ${mib(walEnd)} at the end | ${mark(info.walMax <= TARGETS.walBytes)} |`,
    ...ratioChecks('PostgreSQL, one instance', 'pg-1', TARGETS.postgres),
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
    for (const workload of ['list', 'filtered', 'deep', 'pages', 'getPet']) {
      const base = figures('sqlite-10000', workload)!;
      const big = figures(`sqlite-${pets}`, workload)!;
      const ratio = scaleRatio(find('sqlite-10000', workload)!, find(`sqlite-${pets}`, workload)!);
      scaleLines.push(
        `| ${LABELS[workload]} | ${int(base.rps)} (${base.ratio.toFixed(2)}) | ${int(big.rps)} (${big.ratio.toFixed(2)}) | ${ratio.toFixed(2)} |`,
      );
      checks.push(
        `| ${LABELS[workload]} at ${int(pets)} pets ≥ 0.8× its 10,000 figure | ${ratio.toFixed(2)} | ${mark(ratio >= TARGETS.scale)} |`,
      );
    }
    scaleLines.push('', ...table(rowsOf(`sqlite-${pets}`)));
  }

  const summary = [
    SUMMARY_START,
    `SQLite, 10,000 pets, ${CONNECTIONS} connections, ${info.rounds} interleaved ${info.seconds} s rounds (medians); as shipped: ${shippedAs(info)}.`,
    '',
    ...table([...rowsOf('bare'), ...rowsOf('sqlite-10000')]),
    '',
    '| target | measured | |',
    '|---|---:|---|',
    ...checks,
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
  const extraLines: string[] = [];
  for (const [target, title, setting] of [
    ['sqlite-10000-limit-off', 'SQLite, 10,000 pets', 'per-key rate limit off (`PETSTORE_RATE_LIMIT=off`)'],
    ['sqlite-10000-log-warn', 'SQLite, 10,000 pets', 'request log off (`LOG_LEVEL=warn`: no line per request)'],
    ['pg-1-limit-off', 'PostgreSQL, 10,000 pets, one instance', 'per-key rate limit off (`PETSTORE_RATE_LIMIT=off`)'],
  ] as const) {
    const rows = rowsOf(target);
    if (rows.length) {
      extraLines.push('', `### Extra configuration, not the shipped one: ${title}, ${setting}`, '', ...table(rows));
    }
  }

  const minimalRows = rowsOf('minimal');
  if (minimalRows.length) {
    extraLines.push(
      '',
      '### Reference, not the service: minimal Fastify + better-sqlite3 (`bench/minimal.mjs`), SQLite, 10,000 pets',
      '',
      'One route per operation with a JSON schema, a copy of the same seeded file, `synchronous=FULL`; no key check, rate limit, request log, metrics, page cache or group commit (one fsync per create). "list, limit 20" is read from the database on every request here. What the framework and the database cost before the service adds anything.',
      '',
      ...table(minimalRows),
    );
  }

  const cpu = cpus();
  const lines = [
    '# Benchmark: latest run',
    '',
    `Written by \`${info.command}\` on ${utcMinute(info.startedAt)} UTC in ${info.minutes.toFixed(1)} minutes.`,
    '',
    `- Machine: ${cpu.length} × ${cpu[0]?.model.trim() ?? 'unknown CPU'}, Node ${process.version}; shared, so absolute figures are noisy: read the ratios.`,
    `- Load: ${info.loadGenerator}, ${CONNECTIONS} connections${info.pinned ? ', pinned to CPU 0 with the servers on CPU 1 (taskset)' : ', not pinned (no taskset)'}; ${info.warmup} s warm-up per workload, then ${info.rounds} round${info.rounds === 1 ? '' : 's'}, each running every workload in turn on every server for ${info.seconds} s between samples of ${info.seconds} s of the bare server (each server warmed for ${info.warmup} s before its first sample of a round; a workload runs on the 10,000-pet store and the larger one back to back); medians shown, and the larger store's figure over the smaller's is the median of the rounds' pairs.`,
    `- **As shipped**: ${shippedAs(info)}; API key checked on every request, validation, int64-exact JSON, \`Link\` headers, \`synchronous=FULL\`. Rows marked "extra configuration" change one setting, named in their heading, and judge no target but the limit's cost, which compares each limit-off row with the shipped row of the same workload sampled just before it, round by round.`,
    `- **Page cache**: on SQLite, a listPets page that another animal follows never changes, and is sent again from memory (src/pets/page-cache.ts). "list, limit 20", "status filter" and "cursor near the end" ask for one page over and over, so after the first request they measure that path, key check included; "random page" asks for the page after a random stored id each time, mostly one not kept (the cache holds at most ${int(CACHE_BYTES / info.bodyBytes)} pages of this size, while the 10,000-pet store has about 10,000 different ones), read from the database. PostgreSQL keeps no pages; it reads a page once for all the requests of one turn of the event loop that ask for it (groupCalls' keyOf, src/store/batches.ts), which those three workloads do and "random page" seldom does.`,
    `- Service started as \`node ${[...START_FLAGS, ...info.nodeFlags, 'dist/main.js serve'].join(' ')}\`${info.nodeFlags.length ? ' (flags added with --node-options)' : ', as `npm start` runs it (its node flags are explained in docs/configuration.md)'}.`,
    `- Bare server: \`bench/bare.mjs\`, node:http answering every GET with the same ${info.bodyBytes}-byte page the service sent; each ratio is the median over the rounds of a sample's req/s divided by the mean of the bare GET samples just before and just after it (bare GET median: ${int(bareRps)} req/s).`,
    '- "failed": responses that were not 2xx, plus socket errors, summed over the rounds. "CPU µs per answer": the server process\'s user and system CPU time during the sample divided by the answers it sent (median), from `/proc/<pid>/stat`; it includes the kernel\'s loopback TCP work, and is the figure the machine\'s other load moves least.',
    `- Stores at the end: ${info.storedAtEnd.map((s) => `${int(s.stored)} pets in the store seeded with ${int(s.pets)}`).join('; ')} (createPet and the mix add to the 10,000 store in each round). WAL file at the end: ${info.walEnd.map((w) => `${mib(w.bytes)} (${int(w.pets)})`).join(', ')}; largest seen after any workload: ${mib(info.walMax)}.`,
    `- Memory before any load (peak RSS from start until the first answer): ${info.startedRss.map((r) => `${r.name} ${mib(r.bytes)}`).join(', ')}. The peak RSS target is judged against the service's whole run.`,
    `- PostgreSQL: ${info.postgres}; after its write workloads the run does \`VACUUM ANALYZE\`, a \`CHECKPOINT\` and a \`sync\` at once, so that work does not fall in a later sample of another server.`,
    '',
    '## Summary',
    '',
    ...summary,
    ...scaleLines,
    ...postgresLines,
    ...extraLines,
    '',
    '![Throughput as a share of bare node:http GET](chart.svg)',
    '',
  ];
  const dir = `${ROOT}bench/results/`;
  writeFileSync(`${dir}latest.md`, lines.join('\n'));
  writeFileSync(`${dir}chart.svg`, drawChart(measured, bareRps));

  const readmePath = `${ROOT}docs/benchmark.md`;
  const readme = readFileSync(readmePath, 'utf8');
  const start = readme.indexOf(SUMMARY_START);
  const end = readme.indexOf(SUMMARY_END);
  const written = [`${dir}latest.md`, `${dir}chart.svg`];
  if (start >= 0 && end > start) {
    writeFileSync(readmePath, readme.slice(0, start) + summary.join('\n') + readme.slice(end + SUMMARY_END.length));
    written.push(readmePath);
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
        `<rect x="${10 + i * 220}" y="32" width="12" height="12" fill="${s.color}"/><text x="${26 + i * 220}" y="42">${escape(s.label)}</text>`,
    ),
  ];
  for (const [ratio, label] of [
    [TARGETS.sqlite.pages!, `uncached page ${TARGETS.sqlite.pages}`],
    [TARGETS.sqlite.list!, `first page ${TARGETS.sqlite.list}`],
    [1.0, 'bare GET'],
  ] as const) {
    parts.push(
      `<line x1="${x(ratio)}" y1="${top - 6}" x2="${x(ratio)}" y2="${height - 30}" stroke="#999" stroke-dasharray="4 3"/>`,
      `<text x="${x(ratio)}" y="${height - 16}" text-anchor="middle" fill="#555">${label}</text>`,
    );
  }
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
