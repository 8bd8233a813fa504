import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { parseWrk } from '../bench/load.js';
import { SHIPPED_ENV, START_FLAGS } from '../bench/processes.js';
import {
  npmCommand,
  scaleRatio,
  SUMMARY_END,
  SUMMARY_START,
  tailOf,
  worstOfShippedSqlite,
  type Measured,
} from '../bench/report.js';

const read = (path: string) => readFileSync(new URL(`../${path}`, import.meta.url), 'utf8');

function summaryOf(text: string, where: string): string {
  const start = text.indexOf(SUMMARY_START);
  const end = text.indexOf(SUMMARY_END);
  assert.ok(start >= 0 && end > start, `${where} holds the benchmark summary between its markers`);
  return text.slice(start, end);
}

test('docs/benchmark.md shows the figures of the latest benchmark report, unchanged', () => {
  const report = read('bench/results/latest.md');
  const page = read('docs/benchmark.md');
  assert.equal(summaryOf(page, 'docs/benchmark.md'), summaryOf(report, 'bench/results/latest.md'));
  // It measures the service as shipped, and says so: logs at info, the rate limit counted.
  assert.match(report, /\*\*As shipped\*\*: request logs at `info`/);
  assert.match(report, /PETSTORE_RATE_LIMIT=1000000000/);
  assert.ok(page.includes('](../bench/results/chart.svg)'), 'docs/benchmark.md shows the chart');
  assert.match(read('bench/results/chart.svg'), /^<svg [^>]*xmlns="http:\/\/www.w3.org\/2000\/svg"/);
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

test('p99 ÷ p50 and peak RSS are judged on the shipped service at every SQLite store size, not on extra rows', () => {
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

test('the larger store is compared round by round: the median of each round’s pair of ratios to bare', () => {
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
  assert.equal(Number(scaleRatio(base, big).toFixed(6)), 0.9);
});

test('npm start, npm run petstore and the bench run node with the same flags', () => {
  const { scripts } = JSON.parse(read('package.json')) as { scripts: Record<string, string> };
  const flags = START_FLAGS.join(' ');
  assert.match(flags, /--no-memory-reducer/);
  assert.match(flags, /--max-semi-space-size=2/);
  assert.match(flags, /--no-concurrent-recompilation/);
  assert.equal(scripts.start, `exec node ${flags} dist/main.js serve`);
  assert.equal(scripts.petstore, `exec node ${flags} dist/main.js`);
  // BusyBox's env (Alpine) has no -S: the command's own first line cannot carry a flag.
  assert.equal(read('src/main.ts').split('\n', 1)[0], '#!/usr/bin/env node');
});

// Objects that survive a few collections each, as requests in flight do: V8 grows its young
// generation under such a load unless a flag bounds it.
const YOUNG_LOAD = `
const v8 = require('node:v8');
const newSpace = () => v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
let largest = newSpace();
const kept = [];
for (let i = 0; i < 2e6; i++) {
  kept.push({ i, text: 'x' + i });
  if (kept.length > 100000) kept.splice(0, 50000);
  if (i % 10000 === 0) largest = Math.max(largest, newSpace());
}
process.stdout.write(String(largest));`;

const largestYoungGeneration = (flags: string[]) => {
  const run = spawnSync(process.execPath, [...flags, '-e', YOUNG_LOAD], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  return Number(run.stdout);
};

test("npm start's node flags bound V8's young generation, which grows without them", () => {
  const MB = 2 ** 20;
  // A flag V8 takes but does not act on (as --semi-space-growth-factor=1 was) fails this.
  assert.ok(largestYoungGeneration(START_FLAGS) <= 8 * MB);
  assert.ok(largestYoungGeneration(START_FLAGS.filter((flag) => !flag.includes('semi-space'))) > 16 * MB);
});

// A function hot enough for V8 to optimise; --trace-opt names the mode of each compilation.
const HOT_FUNCTION = `
function f(x) { return x * 2 + 1; }
let s = 0;
for (let i = 0; i < 2e7; i++) s += f(i);
if (s < 0) throw new Error('unreachable');`;

const compilationModes = (flags: string[]) => {
  const run = spawnSync(process.execPath, [...flags, '--trace-opt', '-e', HOT_FUNCTION], { encoding: 'utf8' });
  assert.equal(run.status, 0, run.stderr);
  return new Set([...run.stdout.matchAll(/\[compiling method .*mode: ConcurrencyMode::(\w+)\]/g)].map((m) => m[1]));
};

test("npm start's node flags make V8 optimise on the main thread, which it does on helper threads without them", () => {
  // Helper threads' compilations keep their memory in the threads' malloc arenas (bench/README.md).
  assert.deepEqual(compilationModes(START_FLAGS), new Set(['kSynchronous']));
  assert.ok(compilationModes(START_FLAGS.filter((flag) => !flag.includes('recompilation'))).has('kConcurrent'));
});

test('the bench runs the service with its defaults: logs at info, limits counted, only the key limit out of reach', () => {
  assert.deepEqual(SHIPPED_ENV, { PETSTORE_RATE_LIMIT: '1000000000' });
});
