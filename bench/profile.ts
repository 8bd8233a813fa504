// `npm run bench:profile`: where the time goes. Runs the built service under `node --cpu-prof`
// for one workload at a time (list, a random page, createPet), prints the self time by function and by module
// and writes it to bench/results/profile.md (profile-postgres.md with --postgres).
// Options: --duration 8 --workload list,pages,create --postgres (on PostgreSQL instead of SQLite)
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { drive, workload, workloadName } from './load.js';
import { startService } from './processes.js';
import { npmCommand, utcMinute } from './report.js';
import { POSTGRES_URL, seedPostgres, seedSqlite, type Seeded } from './seed.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const { values: options } = parseArgs({
  options: {
    duration: { type: 'string', default: '8' },
    workload: { type: 'string', default: 'list,pages,create' },
    postgres: { type: 'boolean', default: false },
  },
});
const workloads = options.workload.split(',').map(workloadName);

/** The module a frame belongs to: a package name, a file of this service, or what V8 calls it. */
function moduleOf(url: string, name: string): string {
  if (!url) return name.startsWith('(') ? name : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url;
  const own = url.indexOf('/dist/');
  return own >= 0 ? url.slice(own + 1) : url;
}

function summarise(profile: Profile, top = 25): string[] {
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const byFunction = new Map<string, number>();
  const byModule = new Map<string, number>();
  for (const node of profile.nodes) {
    const time = self.get(node.id) ?? 0;
    const { functionName, url, lineNumber } = node.callFrame;
    const module = moduleOf(url, functionName);
    const name = `${functionName || '(anonymous)'} ${module}${url ? `:${lineNumber + 1}` : ''}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + time);
    byModule.set(module, (byModule.get(module) ?? 0) + time);
  }
  // Inclusive time: a sample counts once for every distinct function on its stack.
  const parent = new Map<number, ProfileNode>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node);
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const inclusive = new Map<string, number>();
  for (const [id, time] of self) {
    const seen = new Set<string>();
    for (let node = byId.get(id); node; node = parent.get(node.id)) {
      const { functionName, url, lineNumber } = node.callFrame;
      if (!url.includes('/dist/') && !url.includes('node_modules/fastify/')) continue;
      seen.add(`${functionName || '(anonymous)'} ${moduleOf(url, functionName)}:${lineNumber + 1}`);
    }
    for (const name of seen) inclusive.set(name, (inclusive.get(name) ?? 0) + time);
  }
  const share = (time: number) => `${((100 * time) / total).toFixed(1).padStart(5)}%`;
  const rank = (map: Map<string, number>, count = top) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([name, time]) => `${share(time)}  ${name}`);
  return [
    'self time by module:',
    ...rank(byModule),
    '',
    'self time by function:',
    ...rank(byFunction),
    '',
    'total time (self and callees) of the service and Fastify functions:',
    ...rank(inclusive, 40),
  ];
}

const temp = mkdtempSync(join(tmpdir(), 'petstore-profile-'));
const report = [
  '# Profile: latest run',
  '',
  `Written by \`${npmCommand('bench:profile')}\` on ${utcMinute(new Date())} UTC.`,
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
    const dir = join(temp, name);
    const service = await startService(name, seeded.env, 1, join(temp, `${name}.log`), {
      // The profiler's flags alone: npm start gives node none.
      flags: ['--cpu-prof', '--cpu-prof-dir', dir],
    });
    try {
      const sample = await drive(workload(name, 10_000, seeded.key), [service.port], Number(options.duration));
      const store = options.postgres ? 'PostgreSQL' : 'SQLite';
      report.push(`\n## ${name} on ${store}: ${Math.round(sample.rps)} req/s under the profiler\n`);
    } finally {
      await service.stop();
      await drop();
    }
    const file = readdirSync(dir).find((f) => f.endsWith('.cpuprofile'))!;
    const profile = JSON.parse(readFileSync(join(dir, file), 'utf8')) as Profile;
    report.push('```', ...summarise(profile), '```');
  }
} finally {
  rmSync(temp, { recursive: true, force: true });
}
const text = report.join('\n') + '\n';
process.stdout.write(text);
const out = new URL(`results/profile${options.postgres ? '-postgres' : ''}.md`, import.meta.url);
writeFileSync(out, text);
