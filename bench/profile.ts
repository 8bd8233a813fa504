// `npm run bench:profile`: where the time goes. Runs the built service under `node --cpu-prof`
// for one workload at a time (getPet, the first page, a random page, createPet), and beside it, on
// SQLite, the reference row (bench/minimal.mjs) under the same profiler for the workloads it has.
// Prints, per workload, the CPU time per answer by part of the request path (the log line,
// metrics, the key check, validation, serialization, node:http's header and socket writes,
// Fastify's lifecycle, the store, the garbage collector), then the self time by module and by
// function, and writes it to bench/results/profile.md (profile-postgres.md with --postgres).
// Options: --duration 8 --workload getPet,list,pages,create --postgres (on PostgreSQL instead of
// SQLite, no reference row) --no-reference --out <name> (bench/results/profile-<name>.md)
// --keep <folder> (the .cpuprofile files, to read again with bench/profile-summary.ts)
// --main <path> (another build's dist/main.js)
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { summarise, type Profile } from './profile-summary.js';
import { drive, workload, workloadName, type WorkloadName } from './load.js';
import { startMinimal, startService, type Running } from './processes.js';
import { npmCommand, utcMinute } from './report.js';
import { POSTGRES_URL, seedPostgres, seedSqlite, type Seeded } from './seed.js';

const { values: options } = parseArgs({
  options: {
    duration: { type: 'string', default: '8' },
    workload: { type: 'string', default: 'getPet,list,pages,create' },
    postgres: { type: 'boolean', default: false },
    reference: { type: 'boolean', default: true },
    // The report's file in bench/results: profile-<out>.md.
    out: { type: 'string' },
    // Another build's dist/main.js to profile instead of this one's (as bench:compare's main=).
    main: { type: 'string' },
    // A folder the profiles are copied to, to be read again (bench/profile-summary.ts) or in a viewer.
    keep: { type: 'string' },
  },
  allowNegative: true,
});
// The workloads bench/minimal.mjs serves.
const REFERENCE_WORKLOADS: WorkloadName[] = ['getPet', 'list', 'pages', 'create'];
const workloads = options.workload.split(',').map(workloadName);

/** Runs `start`'s server under the profiler for `seconds` of `name`, and summarises its profile. */
async function profileOne(
  name: WorkloadName,
  seeded: Seeded,
  dir: string,
  start: (flags: string[]) => Promise<Running>,
): Promise<{ rps: number; lines: string[]; parts: Map<string, number>; answers: number }> {
  const seconds = Number(options.duration);
  const server = await start(['--cpu-prof', '--cpu-prof-dir', dir]);
  let rps: number;
  try {
    rps = (await drive(workload(name, seeded.pets, seeded.key), [server.port], seconds)).rps;
  } finally {
    await server.stop();
  }
  const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'))!;
  if (options.keep) {
    mkdirSync(options.keep, { recursive: true });
    copyFileSync(join(dir, file), join(options.keep, `${dir.split('/').pop()}.cpuprofile`));
  }
  const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile;
  const answers = Math.round(rps * seconds);
  return { rps, answers, ...summarise(profile, answers) };
}

const temp = mkdtempSync(join(tmpdir(), 'petstore-profile-'));
const store = options.postgres ? 'PostgreSQL' : 'SQLite';
const report = [
  '# Profile: latest run',
  '',
  `Written by \`${npmCommand('bench:profile')}\` on ${utcMinute(new Date())} UTC, Node ${process.version}.`,
  '',
  `Each server runs alone under \`node --cpu-prof\` for ${options.duration} s of one workload (50 connections).`,
  "A sample is charged to the first frame, from the leaf up, of a part's module or file; busy time",
  'is the samples that are not waiting, over the answers sent. The profiler slows every server',
  'alike, and a shared machine moves absolute figures: compare shares within one profile.',
];
try {
  for (const name of workloads) {
    let drop = async () => {};
    let seeded: Seeded;
    if (options.postgres) {
      const postgres = await seedPostgres(POSTGRES_URL, `petstore_profile_${process.pid}_${name}`, 10_000);
      drop = postgres.drop;
      seeded = postgres;
    } else {
      seeded = seedSqlite(join(temp, `${name}.db`), 10_000);
    }
    const withReference = options.reference && !options.postgres && REFERENCE_WORKLOADS.includes(name);
    const referencePath = join(temp, `${name}-reference.db`);
    // The reference row reads a copy of the seeded file, as in npm run bench.
    if (withReference) copyFileSync(join(temp, `${name}.db`), referencePath);
    try {
      const service = await profileOne(name, seeded, join(temp, name), (flags) =>
        // The profiler's flags alone: npm start gives node none.
        startService(name, seeded.env, 1, join(temp, `${name}.log`), { flags, main: options.main }),
      );
      report.push(`\n## ${name} on ${store}: the service, ${Math.round(service.rps)} req/s under the profiler\n`);
      report.push('```', ...service.lines, '```');
      if (withReference) {
        const reference = await profileOne(name, seeded, join(temp, `${name}-reference`), (flags) =>
          startMinimal(referencePath, 1, flags),
        );
        report.push(
          `\n## ${name} on ${store}: the reference row (bench/minimal.mjs), ${Math.round(reference.rps)} req/s under the profiler\n`,
        );
        report.push('```', ...reference.lines, '```');
        report.push(`\n### ${name}: busy µs per answer by part, the service beside the reference row\n`);
        report.push('| part | service | reference | difference |', '|---|---:|---:|---:|');
        const partNames = [...new Set([...service.parts.keys(), ...reference.parts.keys()])];
        const us = (time: number | undefined, answers: number) => (time ?? 0) / answers;
        const rows = partNames
          .map(
            (part) =>
              [
                part,
                us(service.parts.get(part), service.answers),
                us(reference.parts.get(part), reference.answers),
              ] as const,
          )
          .sort((a, b) => b[1] - b[2] - (a[1] - a[2]));
        for (const [part, mine, theirs] of rows) {
          report.push(`| ${part} | ${mine.toFixed(1)} | ${theirs.toFixed(1)} | ${(mine - theirs).toFixed(1)} |`);
        }
        const sum = (row: 1 | 2) => rows.reduce((total, r) => total + r[row], 0);
        report.push(`| all | ${sum(1).toFixed(1)} | ${sum(2).toFixed(1)} | ${(sum(1) - sum(2)).toFixed(1)} |`);
      }
    } finally {
      await drop();
    }
  }
} finally {
  rmSync(temp, { recursive: true, force: true });
}
const text = report.join('\n') + '\n';
process.stdout.write(text);
const out = new URL(
  `results/profile${options.out ? `-${options.out}` : options.postgres ? '-postgres' : ''}.md`,
  import.meta.url,
);
writeFileSync(out, text);
