import assert from 'node:assert/strict';
import { test } from 'node:test';
import { recordFigures, size } from './figures.js';
import { childEnv, runProbe } from './process.js';

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
