import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { eventFigures, quantile, relayPlan, type Created } from '../bench/events.js';
import type { Delivered } from '../bench/processes.js';
import { RELAY_PLAN } from '../bench/relay.js';
import { parseWrk } from '../bench/load.js';
import { SHIPPED_ENV, START_COMMAND } from '../bench/processes.js';
import {
  npmCommand,
  pairedRatio,
  referenceRatios,
  renderBacklog,
  renderEvents,
  renderRelay,
  renderReport,
  soakGrowth,
  SUMMARY_END,
  SUMMARY_PAGES,
  SUMMARY_START,
  tailOf,
  TARGETS,
  worstOfShippedSqlite,
  type BacklogRun,
  type EventsRun,
  type Measured,
  type RelayRuns,
  type RunInfo,
  type SoakMinute,
} from '../bench/report.js';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');
const MB = 2 ** 20;

function summaryOf(text: string, where: string): string {
  const start = text.indexOf(SUMMARY_START);
  const end = text.indexOf(SUMMARY_END);
  assert.ok(start >= 0 && end > start, `${where} holds the benchmark summary between its markers`);
  return text.slice(start, end);
}

test('docs/benchmark.md and bench/README.md show the figures of the latest benchmark report, unchanged', () => {
  const report = read('bench/results/latest.md');
  assert.deepEqual(SUMMARY_PAGES, ['docs/benchmark.md', 'bench/README.md']);
  for (const page of SUMMARY_PAGES) {
    assert.equal(summaryOf(read(page), page), summaryOf(report, 'bench/results/latest.md'), page);
  }
  // It measures the service as shipped, and says so: logs at info, the rate limit counted.
  assert.match(report, /\*\*As shipped\*\*: request logs at `info`/);
  assert.match(report, /PETSTORE_RATE_LIMIT=1000000000/);
  assert.ok(read('docs/benchmark.md').includes('](../bench/results/chart.svg)'), 'docs/benchmark.md shows the chart');
  assert.match(read('bench/results/chart.svg'), /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
});

test('bench/README.md stays a runbook of at most 200 lines', () => {
  const lines = read('bench/README.md').split('\n').length;
  assert.ok(lines <= 200, `bench/README.md has ${lines} lines`);
});

test('reads req/s, p50, p99 and failures from wrk --latency output', () => {
  const output = `Running 5s test @ http://127.0.0.1:8080/v1/pets
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  500.00us  40.00ms   90.00%
  Latency Distribution
     50%  850.00us
     75%    2.00ms
     90%    3.00ms
     99%    1.20s
  50000 requests in 5.00s, 60.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 7
Requests/sec:  10000.50
Transfer/sec:     12.00MB
`;
  assert.deepEqual(parseWrk(output), { rps: 10000.5, p50Ms: 0.85, p99Ms: 1200, failures: 12 });
});

test('a report names the npm command that reproduces it: arguments after --, quoted for the shell', (t) => {
  const argv = process.argv;
  t.after(() => (process.argv = argv));
  process.argv = [
    'node',
    'bench/compare.ts',
    '--workload',
    'getPet',
    '--variant',
    'as shipped:',
    '--variant',
    "it's:LOG_LEVEL=warn",
  ];
  assert.equal(
    npmCommand('bench:compare'),
    `npm run bench:compare -- --workload getPet --variant 'as shipped:' --variant 'it'\\''s:LOG_LEVEL=warn'`,
  );
  process.argv = ['node', 'bench/run.ts'];
  assert.equal(npmCommand('bench'), 'npm run bench');
});

test('the tail ratio is p99 ÷ p50, and none when p50 reads 0 (autocannon, under 1 ms)', () => {
  assert.equal(tailOf({ p50Ms: 0.8, p99Ms: 3.2 }), 4);
  assert.ok(Number.isNaN(tailOf({ p50Ms: 0, p99Ms: 2 })));
});

test('peak RSS (and p99 ÷ p50, as information) are judged on the shipped service at every SQLite store size, not on extra rows', () => {
  const MB = 2 ** 20;
  const row = (
    store: Measured['store'],
    p50Ms: number,
    p99Ms: number,
    peakRss: number,
    variant?: Measured['variant'],
  ) => ({
    store,
    variant,
    figures: { p50Ms, p99Ms, peakRss: peakRss * MB },
  });
  const judged = worstOfShippedSqlite([
    row('SQLite', 1, 4, 98), // 10,000 pets
    row('SQLite', 2, 14, 103), // 1,000,000 pets: the worst of both
    row('SQLite', 1, 20, 150, 'limit-off'),
    row('SQLite', 1, 25, 155, 'log-warn'),
    row('SQLite', 1, 30, 160, 'minimal'),
    row('PostgreSQL', 1, 40, 170),
    row('bare', 1, 50, 180),
  ]);
  assert.deepEqual(judged, { worstTail: 7, peakRss: 103 * MB });
});

test('two rows are compared round by round: the median of each round’s pair of ratios to bare', () => {
  const samples = (pairs: [number, number][]) => ({
    samples: pairs.map(([rps, bareRps]) => ({ rps, bareRps, p50Ms: 1, p99Ms: 2, failures: 0 })),
  });
  // Ratios to bare: 0.5, 0.8, 0.3 and 0.45, 0.6, 0.27; the rounds' pairs 0.9, 0.75, 0.9.
  const base = samples([
    [50, 100],
    [40, 50],
    [30, 100],
  ]);
  const big = samples([
    [45, 100],
    [30, 50],
    [27, 100],
  ]);
  assert.equal(Number(pairedRatio(base, big).toFixed(6)), 0.9);
});

test('the bench starts the service as npm start does: node dist/main.js serve, no node flags', () => {
  assert.deepEqual([...START_COMMAND], ['node', 'dist/main.js', 'serve']);
  const { scripts } = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
  assert.equal(scripts.start!.replace(/^exec /, ''), START_COMMAND.join(' '));
});

test('the bench runs the service with its defaults: logs at info, limits counted, only the key limit out of reach', () => {
  assert.deepEqual(SHIPPED_ENV, { PETSTORE_RATE_LIMIT: '1000000000' });
});

// A run of three rounds with fixed figures: every sample has a bare server of 20,000 req/s around it.
const BARE = 20_000;
const sampled = (rps: number[], peakMb = 120): Measured['samples'] =>
  rps.map((value) => ({
    rps: value,
    bareRps: BARE,
    p50Ms: 2,
    p99Ms: 8,
    failures: 0,
    peakRss: peakMb * MB,
    cpuMicros: 50,
  }));
const row = (
  target: string,
  store: Measured['store'],
  workload: string,
  rps: number[],
  more: Partial<Measured> = {},
) => ({
  target,
  store,
  pets: 10_000,
  instances: 1,
  workload,
  samples: sampled(rps),
  ...more,
});

const RUN: Measured[] = [
  {
    ...row('bare', 'bare', 'list', [BARE, BARE, BARE]),
    samples: sampled([BARE, BARE, BARE]).map((s) => ({ ...s, bareRps: undefined })),
  },
  // The service over the reference: getPet 0.8, 0.7, 0.9 (median 0.8, met); a random page 0.7 (not met);
  // the first page 2.0 (met); createPet 2.5 (not met).
  row('sqlite-10000', 'SQLite', 'getPet', [8_000, 7_000, 9_000]),
  row('sqlite-10000', 'SQLite', 'pages', [7_000, 7_000, 7_000]),
  row('sqlite-10000', 'SQLite', 'list', [16_000, 16_000, 16_000]),
  row('sqlite-10000', 'SQLite', 'create', [5_000, 5_000, 5_000]),
  row('sqlite-10000', 'SQLite', 'mix', [9_000, 9_000, 9_000]),
  row('minimal', 'SQLite', 'getPet', [10_000, 10_000, 10_000], { variant: 'minimal' }),
  row('minimal', 'SQLite', 'pages', [10_000, 10_000, 10_000], { variant: 'minimal' }),
  row('minimal', 'SQLite', 'list', [8_000, 8_000, 8_000], { variant: 'minimal' }),
  row('minimal', 'SQLite', 'create', [2_000, 2_000, 2_000], { variant: 'minimal' }),
  // An extra row with its own setting, as a tracing row would be.
  row('sqlite-10000-tracing', 'SQLite', 'getPet', [6_123, 6_123, 6_123], {
    variant: 'tracing',
    setting: 'traces sent to an OTLP collector',
  }),
  // PostgreSQL against bare: list 0.45 (met), getPet 0.45 (not met), create 0.35 (met).
  row('pg-1', 'PostgreSQL', 'list', [9_000, 9_000, 9_000]),
  row('pg-1', 'PostgreSQL', 'getPet', [9_000, 9_000, 9_000]),
  row('pg-1', 'PostgreSQL', 'create', [7_000, 7_000, 7_000]),
];

const INFO: RunInfo = {
  command: 'npm run bench',
  rounds: 3,
  seconds: 5,
  warmup: 1,
  loadGenerator: 'wrk',
  pinned: true,
  postgres: 'postgres://127.0.0.1:5432/test',
  startCommand: 'node dist/main.js serve',
  env: SHIPPED_ENV,
  walEnd: [{ pets: 10_000, bytes: 4 * MB }],
  walMax: 4 * MB,
  startedRss: [{ name: 'the service on SQLite', bytes: 80 * MB }],
  storedAtEnd: [{ pets: 10_000, stored: 50_000 }],
  bodyBytes: 1190,
  startedAt: new Date('2026-11-27T23:00:00Z'),
  minutes: 15,
};

test('the SQLite targets are ratios to the reference row, the same workload in the same rounds', () => {
  assert.deepEqual(TARGETS.reference, { getPet: 0.63, pages: 0.8, list: 1.5, create: 3 });
  const ratios = referenceRatios(RUN).map(({ workload, ratio, target, met }) => ({
    workload,
    ratio: Number(ratio.toFixed(6)),
    target,
    met,
  }));
  assert.deepEqual(ratios, [
    { workload: 'getPet', ratio: 0.8, target: 0.63, met: true },
    { workload: 'pages', ratio: 0.7, target: 0.8, met: false },
    { workload: 'list', ratio: 2, target: 1.5, met: true },
    { workload: 'create', ratio: 2.5, target: 3, met: false },
  ]);
  // No reference row measured (a run without it): no ratio is made up.
  assert.deepEqual(referenceRatios(RUN.filter((m) => m.variant !== 'minimal')), []);
});

test('the report prints the ratio to the reference row per workload, with its target and whether it is met', () => {
  const { latest, summary } = renderReport(RUN, INFO);
  assert.ok(latest.includes(summary), 'the summary is part of the report');
  for (const line of [
    '| workload | service req/s | reference req/s | service ÷ reference | target | |',
    '| getPet, random id | 8,000 | 10,000 | 0.80 | ≥ 0.63 | met |',
    '| list, random page | 7,000 | 10,000 | 0.70 | ≥ 0.80 | **not met** |',
    '| list, limit 20 | 16,000 | 8,000 | 2.00 | ≥ 1.50 | met |',
    '| createPet (both synchronous=FULL) | 5,000 | 2,000 | 2.50 | ≥ 3.00 | **not met** |',
  ]) {
    assert.ok(summary.includes(line), `the summary has ${line}`);
  }
  assert.doesNotMatch(summary, /SQLite: [^|]*÷ bare GET ≥/, 'no SQLite target is a ratio to bare node:http');
});

test('the report judges PostgreSQL against bare node:http, and peak RSS against 256 MB', () => {
  const { summary } = renderReport(RUN, INFO);
  for (const line of [
    '| PostgreSQL, one instance: list, limit 20 ÷ bare GET ≥ 0.40 | 0.45 | met |',
    '| PostgreSQL, one instance: getPet, random id ÷ bare GET ≥ 0.50 | 0.45 | **not met** |',
    '| PostgreSQL, one instance: createPet ÷ bare GET ≥ 0.30 | 0.35 | met |',
    '| peak RSS ≤ 256 MB (worst workload of the shipped SQLite rows) | 120 MB | met |',
  ]) {
    assert.ok(summary.includes(line), `the summary has ${line}`);
  }
  const heavy = RUN.map((m) =>
    m.target === 'sqlite-10000' && m.workload === 'mix' ? { ...m, samples: sampled([9_000, 9_000, 9_000], 260) } : m,
  );
  assert.ok(
    renderReport(heavy, INFO).summary.includes(
      '| peak RSS ≤ 256 MB (worst workload of the shipped SQLite rows) | 260 MB | **not met** |',
    ),
  );
  // p99 ÷ p50 is shown as information, not judged.
  assert.ok(summary.includes('Worst p99 ÷ p50 of the shipped SQLite rows, as information: 4.0×.'));
  assert.doesNotMatch(summary, /\| p99 ≤/);
});

test('an extra row is reported apart under its setting, and judged against no target', () => {
  const { latest, summary } = renderReport(RUN, INFO);
  assert.ok(
    latest.includes('### Extra row, not the shipped service: SQLite, 10,000 pets, traces sent to an OTLP collector'),
  );
  assert.ok(latest.includes('| getPet, random id | 6,123 |'));
  assert.ok(!summary.includes('6,123'), 'the extra row is not in the summary');
});

test("the row with one replica has its own table, with the primary's share of its reads, or says why it is missing", () => {
  const withReplica = [
    ...RUN,
    row('pg-replica', 'PostgreSQL', 'getPet', [7_777, 7_777, 7_777], { variant: 'replica' }),
  ];
  const { latest, summary } = renderReport(withReplica, {
    ...INFO,
    replica: { primaryReads: 31, replicaReads: 9_969 },
  });
  assert.ok(latest.includes('### PostgreSQL, 10,000 pets, one instance reading from one streaming replica'));
  assert.ok(latest.includes('| getPet, random id | 7,777 |'));
  assert.ok(latest.includes('Reads of the animals sent to the primary: 31 of 10,000 (0.3%), the rest to the replica'));
  assert.ok(!summary.includes('7,777'), 'the replica row is not in the summary');
  const missing = renderReport(RUN, { ...INFO, replica: 'not measured: initdb not found in /nowhere' }).latest;
  assert.match(missing, /one streaming replica\n\nnot measured: initdb not found in \/nowhere\.\n/);
});

test('--soak compares the last minute’s peak RSS with the first warm minute’s', () => {
  const minute = (endSeconds: number, peakMb: number): SoakMinute => ({
    endSeconds,
    rps: 9_000,
    p50Ms: 2,
    p99Ms: 9,
    failures: 0,
    peakRss: peakMb * MB,
    rss: (peakMb - 5) * MB,
  });
  const flat = [minute(60, 150), minute(120, 170), minute(180, 160)];
  const grown = [minute(60, 150), minute(120, 160), minute(180, 170)];
  assert.deepEqual(soakGrowth(flat), { first: 150 * MB, last: 160 * MB, growth: 160 / 150 - 1, met: true });
  assert.equal(soakGrowth(grown).met, false);
  const { latest, summary } = renderReport(RUN, { ...INFO, soak: flat });
  assert.ok(
    summary.includes(
      "| RSS flat over 180 s of the 90/10 mix once warm: last minute's peak ≤ first's + 10% | 150 MB → 160 MB (+6.7%) | met |",
    ),
  );
  assert.ok(latest.includes('| 120 s | 9,000 | 9.00 | 170 MB | 165 MB | 0 |'));
  // The soak's minutes count for the peak RSS target: they are the shipped service under the mix.
  const high = renderReport(RUN, { ...INFO, soak: [minute(60, 200), minute(120, 270)] }).summary;
  assert.ok(
    high.includes(
      '| peak RSS ≤ 256 MB (worst workload of the shipped SQLite rows, the soak included) | 270 MB | **not met** |',
    ),
  );
  // Without --soak the report says how to run it.
  assert.ok(renderReport(RUN, INFO).summary.includes('not run here: `npm run bench -- --soak 600`'));
});

test('the events row matches each 201 with its event’s first delivery by the pet id, and counts what never came', () => {
  assert.equal(quantile([10, 20, 30, 40], 0.5), 20);
  assert.equal(quantile([10, 20, 30, 40], 0.99), 40);
  assert.ok(Number.isNaN(quantile([], 0.5)));
  // Creates sent from t = 1,000 ms; 201s of pets 11..14 at 1,100 … 2,000 ms.
  const created: Created[] = [
    { at: 1_100, pet: '11' },
    { at: 1_500, pet: '12' },
    { at: 1_800, pet: '13' },
    { at: 2_000, pet: '14' },
  ];
  const delivered: Delivered[] = [
    { at: 900, id: 'evt_w', pet: '3' }, // the warm-up's: not counted
    { at: 1_300, id: 'evt_11', pet: '11' }, // lag 200
    { at: 1_600, id: 'evt_12', pet: '12' }, // lag 100
    { at: 1_700, id: 'evt_11', pet: '11' }, // again: a duplicate, the first one counts
    { at: 2_400, id: 'evt_13', pet: '13' }, // lag 600, after the last 201
    { at: 2_500, id: 'evt_14', pet: '14' }, // lag 500: drained 500 ms after the last 201
  ];
  assert.deepEqual(eventFigures(created, delivered, 1_000), {
    created: 4,
    madeRate: 4, // 4 creates from 1,000 to 2,000 ms
    delivered: 4,
    duplicates: 1,
    missing: 0,
    deliveredRate: 2, // 11 and 12 arrived while the creates ran
    drainMs: 500,
    lagP50Ms: 200,
    lagP99Ms: 600,
  });
  // Pet 14's event never came: it is missing, and the backlog is not said to have drained.
  const lost = eventFigures(created, delivered.slice(0, -1), 1_000);
  assert.equal(lost.missing, 1);
  assert.equal(lost.delivered, 3);
  assert.ok(Number.isNaN(lost.drainMs));
});

test('the report has the events rows in a table of their own, and says the createPet rows write events', () => {
  const run = (store: EventsRun['store'], rate: number, more: Partial<EventsRun> = {}): EventsRun => ({
    store,
    rate,
    seconds: 15,
    created: rate * 15,
    madeRate: rate,
    failed: 0,
    delivered: rate * 15,
    duplicates: 0,
    missing: 0,
    deliveredRate: Math.min(rate, 600),
    drainMs: 12,
    lagP50Ms: 210,
    lagP99Ms: 480,
    ...more,
  });
  const events = [
    run('SQLite', 250),
    run('PostgreSQL', 250),
    run('SQLite', 1_000, { drainMs: 1_810, lagP50Ms: 1_236, lagP99Ms: 1_791 }),
    run('PostgreSQL', 1_000, { delivered: 14_990, missing: 10, drainMs: NaN }),
  ];
  const { latest, summary } = renderReport(RUN, { ...INFO, events });
  assert.ok(latest.includes('## Events: webhook delivery to a local receiver'));
  const table = renderEvents(events);
  assert.deepEqual(table.slice(2), [
    '| SQLite | 250 (250) | 250 | 12 ms | 210 | 480 | 3,750 of 3,750 | 0 | 0 | 0 |',
    '| SQLite | 1,000 (1,000) | 600 | 1,810 ms | 1,236 | 1,791 | 15,000 of 15,000 | 0 | 0 | 0 |',
    '| PostgreSQL | 250 (250) | 250 | 12 ms | 210 | 480 | 3,750 of 3,750 | 0 | 0 | 0 |',
    '| PostgreSQL | 1,000 (1,000) | 600 | not drained | 210 | 480 | 14,990 of 15,000 | 0 | 10 | 0 |',
  ]);
  for (const line of table) assert.ok(latest.includes(line), `the report has ${line}`);
  assert.ok(!summary.includes('webhook delivery'), 'the events rows are not in the summary the docs copy');
  // The note on the createPet rows: they are measured with events written, on both stores.
  assert.match(latest, /\*\*Events written\*\*: every create of the service, in the createPet and 90\/10 rows/);
  // A run without the events rows says nothing of them.
  assert.ok(!renderReport(RUN, INFO).latest.includes('## Events'));
});

test('the events section has the service’s RSS with a backlog waiting for a hanging receiver, against one window and none', () => {
  const backlogRun = (store: BacklogRun['store'], rest: Partial<BacklogRun>): BacklogRun => ({
    store,
    events: 100_000,
    few: 1_000,
    readings: 5,
    settleSeconds: 20,
    waitingNone: 0,
    waitingFew: 1_000,
    waitingSeen: 100_000,
    attempts: 8,
    rssNone: 0,
    rssFew: 0,
    rssWaiting: 0,
    peakWaiting: undefined,
    ...rest,
  });
  const backlog: BacklogRun[] = [
    backlogRun('SQLite', { rssNone: 90 * MB, rssFew: 91 * MB, rssWaiting: 92.5 * MB, peakWaiting: 95 * MB }),
    backlogRun('PostgreSQL', { attempts: 16, rssNone: 101 * MB, rssFew: 101.2 * MB, rssWaiting: 100.6 * MB }),
  ];
  const table = renderBacklog(backlog);
  assert.equal(
    table[0],
    '| store | service RSS, none waiting | 1,000 waiting | 100,000 waiting | 100,000 against 1,000 | against none | peak | waiting per /metrics | attempts held |',
  );
  assert.deepEqual(table.slice(2), [
    '| SQLite | 90.0 MB | 91.0 MB | 92.5 MB | +1.5 MB | +2.5 MB | 95.0 MB | 0, 1,000, 100,000 | 8 |',
    '| PostgreSQL | 101.0 MB | 101.2 MB | 100.6 MB | −0.6 MB | −0.4 MB | n/a | 0, 1,000, 100,000 | 16 |',
  ]);
  for (const line of table) assert.equal(line.split('|').length, table[0]!.split('|').length, line);
  // A change that rounds to nothing has no sign.
  const flat = renderBacklog([
    backlogRun('SQLite', { rssNone: 106.1 * MB, rssFew: 106.12 * MB, rssWaiting: 106.1 * MB }),
  ]);
  assert.match(flat[2]!, /^\| SQLite \| 106\.1 MB \| 106\.1 MB \| 106\.1 MB \| 0\.0 MB \| 0\.0 MB \|/);
  const { latest, summary } = renderReport(RUN, { ...INFO, backlog });
  // Under the events heading, even in a run without the delivery rows.
  const heading = latest.indexOf('## Events: webhook delivery to a local receiver');
  const section = latest.indexOf('### Memory with 100,000 events waiting for a receiver that hangs');
  assert.ok(heading >= 0 && section > heading);
  for (const line of table) assert.ok(latest.includes(line), `the report has ${line}`);
  assert.match(latest, /read once a second for 5 s, `\/metrics` scraped each second throughout/);
  assert.match(latest, /each phase with events waiting 20 s before its readings/);
  assert.match(latest, /What the backlog itself costs is "100,000 against 1,000"/);
  assert.ok(!summary.includes('hangs'), 'not in the summary the docs copy');
  const withRows = renderReport(RUN, {
    ...INFO,
    backlog,
    events: [
      {
        store: 'SQLite',
        rate: 250,
        seconds: 15,
        created: 3_750,
        madeRate: 250,
        failed: 0,
        delivered: 3_750,
        duplicates: 0,
        missing: 0,
        deliveredRate: 250,
        drainMs: 12,
        lagP50Ms: 210,
        lagP99Ms: 480,
      },
    ],
  }).latest;
  assert.equal(withRows.split('## Events: webhook delivery').length, 2, 'one events heading');
  assert.ok(withRows.indexOf('| SQLite | 250 (250) |') < withRows.indexOf('### Memory with 100,000 events'));
  assert.ok(!renderReport(RUN, INFO).latest.includes('### Memory with'));
});

test("the events section has the relay's measures, each judged against its target", () => {
  const relay: RelayRuns = {
    idle: [
      { store: 'SQLite', instances: 1, count: 50, p50Ms: 3, p99Ms: 9, maxMs: 12 },
      { store: 'PostgreSQL', instances: 1, count: 50, p50Ms: 6, p99Ms: 30, maxMs: 41 },
      { store: 'PostgreSQL', instances: 2, count: 50, p50Ms: 140, p99Ms: 300, maxMs: 320 },
    ],
    hanging: [
      { store: 'SQLite', hanging: 30, backlog: 100, count: 20, gapMs: 250, p50Ms: 2, maxMs: 9, held: 30 },
      { store: 'PostgreSQL', hanging: 1000, backlog: 100, count: 20, gapMs: 250, p50Ms: 12, maxMs: 1200, held: 96 },
    ],
    throughput: [
      {
        store: 'SQLite',
        instances: 1,
        events: 30_000,
        seconds: 6,
        perSecond: 5000,
        cpuShare: 0.8,
        storeShare: 0.12,
        duplicates: 0,
      },
      {
        store: 'PostgreSQL',
        instances: 2,
        events: 30_000,
        seconds: 15,
        perSecond: 2000,
        cpuShare: 0.5,
        storeShare: 1.6,
        duplicates: 0,
      },
    ],
    outage: [
      { store: 'SQLite', outageSeconds: 8, waiting: 20, retryMs: 1000, drainMs: 35, outOfOrder: 2, failedAttempts: 6 },
      {
        store: 'PostgreSQL',
        outageSeconds: 8,
        waiting: 20,
        retryMs: 1000,
        drainMs: 2500,
        outOfOrder: 0,
        failedAttempts: 6,
      },
    ],
  };
  const lines = renderRelay(relay);
  const row = (start: string) => lines.find((line) => line.startsWith(start));
  assert.equal(row('| SQLite | 1 | 50 |'), '| SQLite | 1 | 50 | 3 | 9 | 12 | p50 ≤ 50, max ≤ 250: met |');
  assert.equal(row('| PostgreSQL | 1 | 50 |'), '| PostgreSQL | 1 | 50 | 6 | 30 | 41 | — |');
  assert.equal(row('| PostgreSQL | 2 | 50 |'), '| PostgreSQL | 2 | 50 | 140 | 300 | 320 | p50 ≤ 100: **not met** |');
  assert.equal(row('| SQLite | 30 |'), '| SQLite | 30 | 100 | 20 | 2 | 9 | 30 | met |');
  assert.equal(row('| PostgreSQL | 1,000 |'), '| PostgreSQL | 1,000 | 100 | 20 | 12 | 1,200 | 96 | **not met** |');
  assert.equal(row('| SQLite | 1 | 30,000 |'), '| SQLite | 1 | 30,000 | 5,000 | 0.80 s | 0.12 s | 0 | ≥ 3,000: met |');
  assert.equal(row('| PostgreSQL | 2 | 30,000 |'), '| PostgreSQL | 2 | 30,000 | 2,000 | 0.50 s | 1.60 s | 0 | — |');
  assert.equal(row('| SQLite | 8 s |'), '| SQLite | 8 s | 20 | 35 ms | 2 | 6 | met |');
  assert.equal(row('| PostgreSQL | 8 s |'), '| PostgreSQL | 8 s | 20 | 2,500 ms | 0 | 6 | **not met** |');
  for (const heading of [
    '### Woken by each commit: an idle receiver',
    '### Endpoints that hang beside a healthy one',
    '### Pace: one fast receiver',
    '### After an outage',
  ]) {
    assert.ok(lines.includes(heading), heading);
  }
  // Each table's rows have its header's columns.
  for (const [i, line] of lines.entries()) {
    if (!line.startsWith('| store')) continue;
    for (let j = i + 2; lines[j]?.startsWith('|'); j++)
      assert.equal(lines[j]!.split('|').length, line.split('|').length);
  }
  // Under the events heading, in the report the bench writes; a measure not run has no section.
  const { latest, summary } = renderReport(RUN, { ...INFO, relay });
  const heading = latest.indexOf('## Events: webhook delivery to a local receiver');
  assert.ok(heading >= 0 && latest.indexOf('### Pace: one fast receiver') > heading);
  assert.ok(!summary.includes('### Pace'), 'not in the summary the docs copy');
  assert.ok(!renderRelay({ ...relay, outage: [] }).includes('### After an outage'));
  // The command line's choice of measures.
  assert.deepEqual(relayPlan({ relay: 'none' }).measures, []);
  assert.deepEqual(relayPlan({ relay: 'idle,outage', hanging: '5' }), {
    measures: ['idle', 'outage'],
    hanging: [5],
    throughputEvents: RELAY_PLAN.throughputEvents,
    outageSeconds: RELAY_PLAN.outageSeconds,
  });
  assert.throws(() => relayPlan({ relay: 'speed' }), /--relay takes idle, hanging, throughput, outage or none/);
});
