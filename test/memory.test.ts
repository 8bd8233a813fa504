import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { recordFigures, size } from './figures.js';
import { childEnv, MAIN, runProbe } from './process.js';

const PROBE = new URL('./memory-probe.ts', import.meta.url);
// 100,000 requests take about half a minute on two cores: `npm run soak` runs them, `npm test` a fifth.
const REQUESTS = size.leak.inject;
const SOCKET_REQUESTS = size.leak.socket;
const MiB = 1024 * 1024;
/** Heap after a full collection may differ from the baseline by this much, at most. */
const HEAP_BOUND = 4 * MiB;

interface Sample {
  requests: number;
  heapUsed: number;
  rss: number;
  fds: number;
}

test(`${REQUESTS + SOCKET_REQUESTS} mixed requests leave the heap within ${HEAP_BOUND / MiB} MiB of its baseline and no file descriptor open`, async (t) => {
  const env = {
    ...childEnv(t),
    LOG_LEVEL: 'silent',
    REQUESTS: String(REQUESTS),
    SOCKET_REQUESTS: String(SOCKET_REQUESTS),
  };
  const result = await runProbe<{ baseline: Sample; checkpoints: Sample[]; statuses: Record<string, number> }>(
    PROBE,
    env,
  );
  const { baseline, checkpoints } = result;
  const last = checkpoints.at(-1)!;

  for (const sample of checkpoints) {
    assert.equal(
      sample.fds,
      baseline.fds,
      `${sample.fds - baseline.fds} file descriptors left open after ${sample.requests}`,
    );
  }
  const growth = last.heapUsed - baseline.heapUsed;
  assert.ok(growth < HEAP_BOUND, `heap grew by ${(growth / MiB).toFixed(2)} MiB`);
  // A steady leak grows from checkpoint to checkpoint; settled noise does not.
  const rising = checkpoints.every((sample, i) => i === 0 || sample.heapUsed > checkpoints[i - 1]!.heapUsed);
  assert.ok(!rising || last.heapUsed - checkpoints[0]!.heapUsed < MiB, 'the heap grew at every checkpoint');
  assert.ok(
    result.statuses['201'] && result.statuses['200'] && result.statuses['400'],
    JSON.stringify(result.statuses),
  );
  recordFigures('memory', { ...result, heapGrowthBytes: growth, heapBoundBytes: HEAP_BOUND });
});

// `petstore serve`, once it listens: which of Node's own modules it loaded, on the last line.
const LOADED_WHEN_LISTENING = `
  process.argv.splice(1, 0, ${JSON.stringify(MAIN)});
  await import(${JSON.stringify(pathToFileURL(MAIN).href)});
  const deadline = Date.now() + 15000;
  const listening = () => process.getActiveResourcesInfo().includes('TCPServerWrap');
  while (!listening() && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
  process.stdout.write('\\n' + JSON.stringify({ listening: listening(), modules: process.moduleLoadList }) + '\\n');
  process.exit(0);
`;

test("serving does not load Node's fetch implementation (undici), which it never uses", async (t) => {
  const { stdout } = await promisify(execFile)(
    process.execPath,
    ['--input-type=module', '-e', LOADED_WHEN_LISTENING, 'serve'],
    {
      env: childEnv(t, { LOG_LEVEL: 'silent' }),
      timeout: 30_000,
    },
  );
  const { listening, modules } = JSON.parse(stdout.trim().split('\n').at(-1)!) as {
    listening: boolean;
    modules: string[];
  };
  assert.ok(listening, stdout);
  assert.ok(
    modules.some((name) => name.includes('node:http') || name.includes('_http_server')),
    'the list names node:http',
  );
  assert.deepEqual(
    modules.filter((name) => name.includes('undici')),
    [],
    'an ES import of node:http reads its WebSocket export, which loads undici: import it from src/http/node-http.ts',
  );
});
