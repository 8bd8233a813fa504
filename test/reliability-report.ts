import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { format, resolveConfig } from 'prettier';
import { sizes } from './figures.js';

/*
 * `npm run reliability` (the sizes `npm test` runs) and `npm run soak` (the long run, a random
 * fuzz seed): runs the reliability tests, each recording what it measured, and writes
 * docs/reliability.md from those figures. A failing run leaves the document as it was.
 */

const soak = process.argv.includes('--soak');
const files = ['test/fuzz.test.ts', 'test/durability.test.ts', 'test/shutdown.test.ts', 'test/memory.test.ts'];
const root = new URL('..', import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), 'petstore-reliability-'));
const figuresFile = join(dir, 'figures.jsonl');

const run = spawnSync(process.execPath, ['--import', 'tsx', '--test', '--test-reporter=spec', ...files], {
  cwd: root,
  stdio: 'inherit',
  env: { ...process.env, PETSTORE_FIGURES: figuresFile, ...(soak && { PETSTORE_SOAK: '1' }) },
});
if (run.status !== 0) {
  rmSync(dir, { recursive: true, force: true });
  process.stderr.write('\nThe reliability tests failed: docs/reliability.md is left unchanged.\n');
  process.exit(1);
}

type Figures = Record<string, unknown> & { name: string; at: string };
const figures: Figures[] = readFileSync(figuresFile, 'utf8')
  .split('\n')
  .filter(Boolean)
  .map((line) => JSON.parse(line));
rmSync(dir, { recursive: true, force: true });
const byName = (name: string) => figures.find((entry) => entry.name === name);
const n = (value: unknown) => Number(value).toLocaleString('en-US');
const leak = (of: typeof sizes.test) => of.leak.inject + of.leak.socket;
const mib = (bytes: unknown) => `${(Number(bytes) / 1024 / 1024).toFixed(2)} MiB`;
const notRun = '| (not run: PostgreSQL was not reachable) | | | | | |';

function fuzzRow(name: string): string {
  const entry = byName(`fuzz ${name}`);
  if (!entry) return notRun.replace('(not', `${name} (not`);
  const statuses = Object.entries(entry.statuses as Record<string, number>)
    .map(([status, count]) => `${status}×${count}`)
    .join(' ');
  return `| ${name} | ${n(entry.runs)} | ${n(entry.serverErrors)} | ${n(entry.createdAndReadBack)} | ${n(entry.refusedAndUnchanged)} | ${statuses} |`;
}

function crashRow(store: string): string {
  const entry = byName(`crash durability ${store}`);
  if (!entry) return `| ${store} | (not run: PostgreSQL was not reachable) | | | |`;
  return `| ${store} | ${entry.cycles} | ${n(entry.acknowledged)} | ${n(entry.storedAfterRestart)} | ${entry.lost} | ${(entry.killDelaysMs as number[]).join(', ')} |`;
}

const fuzzSeed = byName('fuzz inject SQLite')?.seed;
const shutdown = byName('graceful shutdown');
const memory = byName('memory') as
  | (Figures & {
      total: number;
      overSocket: number;
      durationMs: number;
      heapGrowthBytes: number;
      heapBoundBytes: number;
      baseline: { heapUsed: number; fds: number };
      checkpoints: { requests: number; heapUsed: number; rss: number; fds: number }[];
    })
  | undefined;
const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: root }).toString().trim();

const document = `# Reliability

What the test suite checks about the service's behaviour under hostile input, crashes, shutdown
and long runs, how to run each check, and the figures of the last run. This page is written by
\`npm run reliability\` (the sizes \`npm test\` runs) or \`npm run soak\` (longer runs, a random
seed); do not edit it by hand.

Last run: ${figures[0]?.at ?? 'never'}, ${soak ? '**soak mode**' : '`npm test` sizes'}, commit \`${commit}\`,
Node ${process.version}, ${cpus().length} cores (${cpus()[0]?.model.trim()}), shared with other work, so durations are noisy.

## Properties of every answer (fuzzing)

\`test/fuzz.test.ts\`, with [fast-check](https://fast-check.dev). Generated requests cover
methods, paths (valid, malformed and unknown ids, percent-encodings, dot segments, over-long
URLs), query strings (valid, out-of-range, repeated and unknown parameters, forged cursors),
headers (missing, wrong and malformed keys, content types, Idempotency-Key values) and bodies:
valid pets (any Unicode name, int64 at its edges, \`7.0\`/\`7e0\` forms, any key order), pets
one step from valid (a field dropped, repeated, unknown or of the wrong type, huge and negative
numbers, control characters, lone surrogates), and hostile bodies (truncated JSON, nesting
thousands deep, invalid UTF-8, a byte order mark, random bytes, over 16 KiB).

For each request:

1. no 5xx;
2. the answer is in the served document (\`GET /v1/openapi.json\`): its status is listed for the
   operation the request reaches, and its body validates against that response's schema with
   Ajv's JSON Schema 2020-12 validator, \`$ref\`s resolved in the document; a request that
   reaches no operation gets only a catalogued answer (404, 405 with \`Allow\`, 414, or the HTTP
   parser's 400/408/431), with an Error body whose \`code\` and \`status\` agree with the
   document's table and the HTTP status; integers are read exactly (an integer outside int64 fails);
3. every 201 from createPet reads back (\`GET /v1/pets/{id}\`, with a second key) with exactly
   the fields sent, int64 compared digit for digit, and adds exactly one animal (none on a replay);
4. the stored animals change by exactly what the 201s created (compared in full before and
   after), so no 4xx and no other answer stores anything;
5. an Idempotency-Key replays only after a 201 for it, replays that 201 byte for byte, and a
   refused first request is not remembered (a 422 needs an earlier 201 with the key);
6. a HEAD gets the status and headers of the same request as GET (RFC 9110 section 9.3.2).

Requests go one at a time (all six properties), and in batches of up to eight sent at once, where
races are what is tried (properties 1 to 4).

Over a real socket the requests also bend HTTP/1.1 framing: chunked bodies, a Content-Length one
byte short or absent, a 17 KiB header, a control character in a header, unknown and lower-case
methods, HTTP/1.0, a space in the target, an absolute-form target, an unknown \`Expect\`,
\`Expect: 100-continue\`, no \`Host\`, and CONNECT.

Requests the fuzzer found answered outside the document stay in \`test/fuzz.test.ts\` as fixed
cases: a malformed request to getPet (400 was not listed for it), an HTTP/1.1 request without
\`Host\` (Node's bodiless 400), an unknown \`Expect\` (Node's bodiless 417) and CONNECT (the
connection was dropped).

A failure is shrunk to a minimal request and printed as a \`curl\` command, with the seed to rerun it:
\`PETSTORE_FUZZ_SEED=<seed> node --import tsx --test test/fuzz.test.ts\`.

Seed of the last run: ${fuzzSeed ?? '(none)'}.

| target | requests | 5xx | 201s read back exactly | 4xx with store unchanged | statuses |
|---|---|---|---|---|---|
${fuzzRow('inject SQLite')}
${fuzzRow('inject SQLite, tight limits')}
${fuzzRow('socket SQLite')}
${fuzzRow('inject PostgreSQL')}
${fuzzRow('socket SQLite, batches of up to 8')}
${fuzzRow('inject PostgreSQL, batches of up to 8')}

## Acknowledged writes survive kill -9

\`test/durability.test.ts\`: the real \`petstore serve\` process, eight concurrent clients
creating animals (categoryId beyond 2^53), killed with SIGKILL at a random moment 30 to 430 ms
after its first acknowledged create, restarted, several cycles. Then every acknowledged id must
be stored with exactly the acknowledged body, nothing stored may be something never sent, and
the next id must be above every stored one.

| store | cycles | acknowledged | stored after restart | lost | kill delays (ms) |
|---|---|---|---|---|---|
${crashRow('SQLite')}
${crashRow('PostgreSQL')}

## Graceful shutdown under load

\`test/shutdown.test.ts\`: eight clients creating and listing while sixteen creates are still
sending their bodies; then SIGTERM. The sixteen must get their 201 and be stored, no answer may be
a 5xx, a new connection must be refused, and the process must exit 0 within 5 seconds.

${
  shutdown
    ? `Last run: answers before exit ${JSON.stringify(shutdown.answeredBeforeExit)}, connections refused or reset after the signal ${JSON.stringify(shutdown.refusedAfterSignal)}, in-flight creates completed ${shutdown.inFlightCompleted} of 16, exit ${shutdown.drainMs} ms after SIGTERM.`
    : 'Not run.'
}

## No leak over a long run

\`test/memory.test.ts\` runs \`test/memory-probe.ts\` in its own process with \`--expose-gc\`:
mixed requests (creates, idempotent creates, pages, reads, and 400, 401, 404, 405 refusals)
through \`inject\` and over real connections. After a full collection, the heap must stay within
${memory ? mib(memory.heapBoundBytes) : 'the bound'} of its baseline and must not rise at every
checkpoint; open file descriptors (\`/proc/self/fd\`) must be back to the baseline at each.
\`npm test\` sends ${n(leak(sizes.test))} requests; \`npm run soak\` ${n(leak(sizes.soak))}.

${
  memory
    ? `Last run: ${n(memory.total)} requests through inject and ${n(memory.overSocket)} over sockets in ${n(memory.durationMs)} ms. Heap after collection: baseline ${mib(memory.baseline.heapUsed)}, then ${memory.checkpoints.map((c) => `${mib(c.heapUsed)} after ${n(c.requests)}`).join(', ')}; growth ${mib(memory.heapGrowthBytes)}. File descriptors: baseline ${memory.baseline.fds}, then ${memory.checkpoints.map((c) => c.fds).join(', ')}.`
    : 'Not run.'
}

## How to run

- \`npm test\`: all of the above at the sizes shown with a fixed seed, within the whole suite.
- \`npm run reliability\`: only these tests, at the same sizes, and rewrites this page.
- \`npm run soak\`: longer runs (${n(sizes.soak.fuzz.sqlite)} fuzzed requests on SQLite, ${n(sizes.soak.fuzz.postgres)} on PostgreSQL,
  ${n(sizes.soak.fuzz.batches)} concurrent batches on each, ${sizes.soak.killCycles} kill cycles per store, ${n(leak(sizes.soak))} requests for the leak check) with a random fuzz seed, printed
  at the start; rewrites this page.
- PostgreSQL checks run when \`PETSTORE_TEST_DATABASE_URL\` (default
  \`postgres://postgres@127.0.0.1:5432/test\`) answers, are skipped loudly when it does not,
  and fail when it does not under \`CI=true\`.
`;

const target = join(root, 'docs/reliability.md');
// Written as `npm run format` would leave it, so the format check stays clean.
writeFileSync(target, await format(document, { ...(await resolveConfig(target)), parser: 'markdown' }));
process.stderr.write(`\nWrote docs/reliability.md from ${figures.length} measurements.\n`);
