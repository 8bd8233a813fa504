// `npm run bench:compare`: what one change costs, in server CPU time per answer, measured the
// way small differences can be seen on a shared machine: every variant runs at once, each on its
// own copy of one seeded SQLite file (CPU 1, load from CPU 0), and samples alternate between them, round after
// round, so a busy moment of the machine falls on all of them; the median of each is reported.
// CPU time is counted on every thread of the server (`perf stat --per-thread` when perf is
// installed, else /proc/<pid>/stat), divided by the answers it sent; with it each sample's p99
// latency and peak RSS (VmHWM, reset before each sample). `--pause <s>` leaves every server idle
// that long before each sample, as a service sits between bursts; `--pets <n>` seeds n pets
// instead of 10,000.
//
//   npm run bench:compare -- --workload getPet --variant 'shipped:' --variant 'no request log:LOG_LEVEL=warn'
//   npm run bench:compare -- --variant 'this build:' --variant 'before:main=/tmp/before/dist/main.js'
//
// A variant is `label:` then settings separated by spaces: environment variables for the
// service (as shipped otherwise: SHIPPED_ENV), `main=<path>` to run another build's
// dist/main.js, and `flags=<a>,<b>` to give node flags, which npm start does not: an explicit
// comparison, never the shipped service.
// The report goes to standard output and bench/results/compare.md (compare-<name>.md with
// `--out <name>`).
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { drive, workload, workloadName } from './load.js';
import { ROOT, startService, type Running } from './processes.js';
import { median, npmCommand, utcMinute } from './report.js';
import { POSTGRES_URL, seedPostgres, seedSqlite, storeFor, type Seeded } from './seed.js';

const { values: options } = parseArgs({
  options: {
    workload: { type: 'string', default: 'getPet' },
    variant: { type: 'string', multiple: true, default: [] },
    rounds: { type: 'string', default: '6' },
    duration: { type: 'string', default: '3' },
    // Idle seconds before every sample, all servers quiet: what happens to a service left idle.
    pause: { type: 'string', default: '0' },
    // The report's file in bench/results: compare-<out>.md; compare.md without it.
    out: { type: 'string' },
    postgres: { type: 'boolean', default: false },
    // Pets seeded before the first sample.
    pets: { type: 'string', default: '10000' },
  },
});
const rounds = Number(options.rounds);
const seconds = Number(options.duration);
const pause = Number(options.pause);
const pets = Number(options.pets);
if (!Number.isInteger(pets) || pets < 100) throw new Error('--pets must be an integer of at least 100');
if (options.variant.length < 2) throw new Error("give two or more --variant 'label:settings'");

const temp = mkdtempSync(join(tmpdir(), 'petstore-compare-'));
process.on('exit', () => rmSync(temp, { recursive: true, force: true }));
const seeded: Seeded & { drop?: () => Promise<void> } = options.postgres
  ? await seedPostgres(POSTGRES_URL, `bench_compare_${process.pid}`, pets)
  : seedSqlite(join(temp, 'pets.db'), pets);
const storeName = options.postgres ? 'PostgreSQL' : 'SQLite';

const load = workload(workloadName(options.workload), pets, seeded.key);
const writes = load.kind === 'create' || load.kind === 'mix';
const hasPerf = spawnSync('perf', ['--version']).error === undefined;

/** CPU time of every thread of `server` while `run` goes on, in microseconds. */
async function cpuDuring(server: Running, run: () => Promise<number>): Promise<{ micros: number; answers: number }> {
  if (!hasPerf) {
    const before = server.cpuMicros();
    const answers = await run();
    return { micros: server.cpuMicros() - before, answers };
  }
  const perf = spawn(
    'perf',
    ['stat', '-e', 'task-clock', '--per-thread', '-p', String(server.child.pid), '--', 'sleep', String(seconds)],
    { stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const exited = new Promise((resolve) => perf.on('exit', resolve));
  let text = '';
  perf.stderr.on('data', (chunk) => (text += chunk));
  const answers = await run();
  await exited;
  const ms = [...text.matchAll(/([0-9.]+) msec task-clock/g)].reduce((sum, match) => sum + Number(match[1]), 0);
  return { micros: ms * 1000, answers };
}

interface Variant {
  label: string;
  server: Running;
  perAnswer: number[];
  peaks: number[];
  p99s: number[];
  rates: number[];
}
const variants: Variant[] = [];
for (const spec of options.variant) {
  const colon = spec.indexOf(':');
  const label = colon < 0 ? spec : spec.slice(0, colon);
  const settings = Object.fromEntries(
    (colon < 0 ? '' : spec.slice(colon + 1))
      .split(' ')
      .filter(Boolean)
      .map((pair) => [pair.slice(0, pair.indexOf('=')), pair.slice(pair.indexOf('=') + 1)]),
  );
  const { main, flags, ...env } = settings;
  // SQLite: a copy of the seeded file each (one process serves a SQLite file).
  const store = storeFor(seeded, join(temp, `pets-${variants.length}.db`));
  const server = await startService(label, { ...store.env, ...env }, 1, join(temp, `${variants.length}.log`), {
    ...(flags !== undefined && { flags: flags.split(',').filter(Boolean) }),
    ...(main !== undefined && { main }),
  });
  variants.push({ label, server, perAnswer: [], peaks: [], p99s: [], rates: [] });
}
try {
  for (const { server } of variants) await drive(load, [server.port], 2);
  for (let round = 1; round <= rounds; round++) {
    for (const variant of variants) {
      if (pause > 0) await sleep(pause * 1000);
      variant.server.resetPeak();
      const { micros, answers } = await cpuDuring(variant.server, async () => {
        const sample = await drive(load, [variant.server.port], seconds);
        variant.p99s.push(sample.p99Ms);
        variant.rates.push(sample.rps);
        return sample.rps * seconds;
      });
      variant.perAnswer.push(micros / answers);
      variant.peaks.push(variant.server.peakRss() ?? NaN);
      variant.server.trimLog();
      // The writes' background work (PostgreSQL's checkpoint, autovacuum) done now, not in the next sample.
      if (writes) await seeded.settle?.();
    }
    process.stderr.write(`round ${round}/${rounds}\n`);
  }
} finally {
  for (const { server } of variants) await server.stop();
  await seeded.drop?.();
}

const first = median(variants[0]!.perAnswer);
const mb = (bytes: number) => (bytes / 2 ** 20).toFixed(0);
const sampling = [
  `${rounds} rounds of ${seconds} s per variant, alternating`,
  ...(pause > 0 ? [`every sample after ${pause} s with all servers idle`] : []),
];
const lines = [
  `# Compare${options.out ? `: ${options.out}` : ''}`,
  '',
  `Written by \`${npmCommand('bench:compare')}\` on ${utcMinute(new Date())} UTC, Node ${process.version}.`,
  '',
  `Workload ${options.workload} on ${storeName} (${pets.toLocaleString('en')} pets), ${sampling.join(', ')}. Server CPU time per answer (${hasPerf ? '`perf stat --per-thread`, every thread' : '/proc/<pid>/stat'}); answers a second; p99 latency; peak RSS (VmHWM, reset before each sample). Medians over the rounds, and the highest peak.`,
  '',
  '| variant | µs per answer | against the first | every round | req/s | p99 ms | peak RSS MB | highest |',
  '|---|---:|---:|---|---:|---:|---:|---:|',
  ...variants.map(({ label, perAnswer, peaks, p99s, rates }) => {
    const value = median(perAnswer);
    const change = ((value / first - 1) * 100).toFixed(1);
    const cells = [
      label,
      value.toFixed(1),
      `${Number(change) > 0 ? '+' : ''}${change}%`,
      perAnswer.map((v) => v.toFixed(0)).join(' '),
      median(rates).toFixed(0),
      median(p99s).toFixed(2),
      mb(median(peaks)),
      mb(Math.max(...peaks)),
    ];
    return `| ${cells.join(' | ')} |`;
  }),
  '',
];
writeFileSync(`${ROOT}bench/results/compare${options.out ? `-${options.out}` : ''}.md`, lines.join('\n'));
process.stdout.write(lines.join('\n'));
