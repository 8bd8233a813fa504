import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CountMinSketch, SKETCH_WIDTH } from '../src/http/sketch.js';
import { runProbe } from './process.js';

const PROBE = new URL('./refused-keys-probe.ts', import.meta.url);
const MiB = 1024 * 1024;

test('the sketch counts each subject exactly while few share it, and never under', () => {
  const sketch = new CountMinSketch();
  for (let i = 1; i <= 100; i++) assert.equal(sketch.add('192.0.2.7'), i);
  assert.equal(sketch.add('192.0.2.8'), 1);
  // Many more subjects than cells in a row: every count is still at least the true one.
  const truth = new Map<string, number>();
  for (let i = 0; i < 4 * SKETCH_WIDTH; i++) {
    const subject = `10.0.${i % 5000}.${i % 7}`;
    const count = (truth.get(subject) ?? 0) + 1;
    truth.set(subject, count);
    assert.ok(sketch.add(subject) >= count);
  }
  assert.ok(sketch.add('192.0.2.7') >= 101);
  sketch.clear();
  assert.equal(sketch.add('192.0.2.7'), 1);
});

test('40,000 refused keys from as many forwarded addresses get 401 each and leave the heap within 1.5 MiB', async () => {
  const result = await runProbe<{ heapGrowthBytes: number; statuses: Record<string, number> }>(PROBE, {
    PATH: process.env.PATH ?? '',
    KEYS: '40000',
    ADDRESS_REPEATS: '1',
  });
  // One key per address, far under the limit: no address is taken for another.
  assert.deepEqual(result.statuses, { 401: 42_000 });
  assert.ok(result.heapGrowthBytes < 1.5 * MiB, `the heap grew by ${(result.heapGrowthBytes / MiB).toFixed(2)} MiB`);
});
