// What `npm run bench:profile` reads in a V8 CPU profile (`node --cpu-prof`): the busy time per
// answer by part of the request path, and the self and total time by module and by function.
// Also runs alone on saved profiles: node --import tsx bench/profile-summary.ts <file.cpuprofile> <answers>
import { readFileSync } from 'node:fs';

export interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}
export interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

/** The module a frame belongs to: a package name, a file of this service, or what V8 calls it. */
export function moduleOf(url: string, name: string): string {
  if (!url) return name.startsWith('(') ? name : '(native)';
  const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
  if (pkg) return pkg[1]!;
  if (url.startsWith('node:')) return url;
  const own = url.indexOf('/dist/');
  return own >= 0 ? url.slice(own + 1) : url;
}

const FRAMEWORK = new Set([
  'fastify',
  'find-my-way',
  'avvio',
  '@fastify/error',
  'light-my-request',
  'fast-querystring',
  'toad-cache',
  'fastify-plugin',
]);

/** The parts a package or service frame is charged to, first match wins. */
const PARTS: [part: string, test: (module: string, url: string) => boolean][] = [
  ['log line (pino)', (m, u) => m === 'pino' || m === 'sonic-boom' || u.endsWith('/http/request-log.js')],
  ['metrics (prom-client)', (m, u) => m === 'prom-client' || u.endsWith('/http/metrics.js')],
  ['store', (m, u) => m === 'better-sqlite3' || m === 'pg' || m === 'pg-protocol' || u.includes('/dist/store/')],
  ['validation', (m, u) => m === 'ajv' || u.endsWith('/http/validation.js') || u.endsWith('/http/query.js')],
  ['serialization', (m) => m === 'fast-json-stringify'],
  ['key check and rate limit', (_m, u) => /\/dist\/(http\/(auth|rate-limit|rate-counters|sketch)|keys\/)/.test(u)],
  [
    'observability and hardening hooks',
    (_m, u) =>
      /\/dist\/http\/(observability|operation|limits|hardening|methods|connections|tracing|addresses)\.js/.test(u),
  ],
  ['the routes (src/pets, minimal.mjs)', (_m, u) => u.includes('/dist/pets/') || u.includes('/bench/minimal.mjs')],
  ['other service code', (_m, u) => u.includes('/dist/')],
];

/** node's own parts, by the module of a node: frame. */
function nodePart(module: string): string {
  if (/^node:_http_(outgoing|server|common|incoming)$/.test(module)) return 'node:http (headers, parsing, writeHead)';
  if (module === 'node:net' || module.startsWith('node:internal/stream') || module === 'node:stream') {
    return 'sockets and streams (node:net, streams)';
  }
  return 'other node internals (events, timers, microtasks)';
}

// Time that belongs to no answer: waiting, and V8's own bookkeeping outside JavaScript.
const NOT_AN_ANSWER = new Set(['(idle)', '(program)', '(root)']);

/**
 * The part a sample is charged to, from its stack (leaf first): the first package or service
 * frame names it (a native frame, or node's, is charged to the code that called it), except
 * Fastify's: what node does below Fastify (writeHead, the socket write) is node's, and only
 * Fastify's own code is its lifecycle. A stack of node frames alone (reading a socket, timers)
 * is node's. Undefined for module loading at the start, which no answer pays for.
 */
export function partOf(stack: ProfileNode[]): string | undefined {
  let below: string | undefined;
  for (const node of stack) {
    const { functionName, url } = node.callFrame;
    if (url.startsWith('node:internal/modules/')) return undefined;
    const module = moduleOf(url, functionName);
    if (module === '(garbage collector)') return 'garbage collector';
    if (url.startsWith('node:')) {
      below ??= nodePart(module);
      continue;
    }
    if (!url) continue;
    if (FRAMEWORK.has(module)) return below ?? 'Fastify lifecycle (fastify, find-my-way)';
    const part = PARTS.find(([, test]) => test(module, url))?.[0];
    if (part) return part;
  }
  return below ?? 'other';
}

export interface Summary {
  /** Busy time by part, in microseconds. */
  parts: Map<string, number>;
  lines: string[];
}

/** The summary of `profile`, its busy time divided by `answers`. */
export function summarise(profile: Profile, answers: number, top = 20): Summary {
  const self = new Map<number, number>();
  profile.samples.forEach((id, i) => self.set(id, (self.get(id) ?? 0) + (profile.timeDeltas[i] ?? 0)));
  const parent = new Map<number, ProfileNode>();
  for (const node of profile.nodes) for (const child of node.children ?? []) parent.set(child, node);
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const stackOf = (id: number) => {
    const stack: ProfileNode[] = [];
    for (let node = byId.get(id); node; node = parent.get(node.id)) stack.push(node);
    return stack;
  };
  const parts = new Map<string, number>();
  let busy = 0;
  for (const [id, time] of self) {
    if (NOT_AN_ANSWER.has(byId.get(id)!.callFrame.functionName)) continue;
    const part = partOf(stackOf(id));
    if (part === undefined) continue;
    parts.set(part, (parts.get(part) ?? 0) + time);
    busy += time;
  }
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
  const inclusive = new Map<string, number>();
  for (const [id, time] of self) {
    const seen = new Set<string>();
    for (const node of stackOf(id)) {
      const { functionName, url, lineNumber } = node.callFrame;
      if (!url.includes('/dist/') && !url.includes('node_modules/fastify/')) continue;
      seen.add(`${functionName || '(anonymous)'} ${moduleOf(url, functionName)}:${lineNumber + 1}`);
    }
    for (const name of seen) inclusive.set(name, (inclusive.get(name) ?? 0) + time);
  }
  const share = (time: number, of = total) => `${((100 * time) / of).toFixed(1).padStart(5)}%`;
  const perAnswer = (time: number) => `${(time / answers).toFixed(1).padStart(6)} µs`;
  const rank = (map: Map<string, number>, count = top) =>
    [...map]
      .sort((a, b) => b[1] - a[1])
      .slice(0, count)
      .map(([name, time]) => `${share(time)}  ${name}`);
  return {
    parts,
    lines: [
      `busy time per answer: ${perAnswer(busy)} (${answers} answers; waiting and module loading left out)`,
      '',
      'busy time by part of the request path (share of the busy time, time per answer):',
      ...[...parts]
        .sort((a, b) => b[1] - a[1])
        .map(([part, time]) => `${share(time, busy)}  ${perAnswer(time)}  ${part}`),
      '',
      'self time by module (share of the whole profile, waiting included):',
      ...rank(byModule),
      '',
      'self time by function:',
      ...rank(byFunction, 30),
      '',
      'total time (self and callees) of the service and Fastify functions:',
      ...rank(inclusive, 40),
    ],
  };
}

if (process.argv[1]?.endsWith('profile-summary.ts')) {
  const [file, answers] = process.argv.slice(2);
  const profile = JSON.parse(readFileSync(file!, 'utf8')) as Profile;
  process.stdout.write(summarise(profile, Number(answers)).lines.join('\n') + '\n');
}
