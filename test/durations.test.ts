import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Counter, Histogram, Registry } from 'prom-client';
import { AnswerMetrics, Durations } from '../src/http/durations.js';

const BUCKETS = [0.001, 0.01, 0.1];
const NAMES = { requests: 'answers_total', duration: 'answer_seconds' };
const HELP = { requests: 'Answers.', duration: 'Answer time.' };
const OBSERVED: [string, string, number, number][] = [
  ['listPets', 'GET', 200, 0.0005],
  ['listPets', 'GET', 200, 0.001],
  ['listPets', 'GET', 200, 0.05],
  ['listPets', 'GET', 200, 3],
  ['createPet', 'POST', 201, 0.002],
  ['listPets', 'GET', 400, 0.0001],
];

test('AnswerMetrics writes what prom-client’s Counter and Histogram write for the same observations', async () => {
  const ours = new Registry();
  const answers = new AnswerMetrics(BUCKETS);
  answers.register(ours, { name: NAMES.duration, help: HELP.duration }, { name: NAMES.requests, help: HELP.requests });
  const theirs = new Registry();
  const labelNames = ['operation', 'method', 'status'] as const;
  const counter = new Counter({ name: NAMES.requests, help: HELP.requests, labelNames, registers: [theirs] });
  const histogram = new Histogram({
    name: NAMES.duration,
    help: HELP.duration,
    labelNames,
    buckets: BUCKETS,
    registers: [theirs],
  });
  for (const [operation, method, status, seconds] of OBSERVED) {
    answers.observe(operation, method, status, seconds);
    const labels = { operation, method, status: String(status) };
    counter.inc(labels);
    histogram.observe(labels, seconds);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.deepEqual(await ours.getMetricsAsJSON(), await theirs.getMetricsAsJSON());
  assert.match(
    await ours.metrics(),
    /^answer_seconds_bucket\{le="0\.001",operation="listPets",method="GET",status="200"\} 2$/m,
  );
  assert.match(
    await ours.metrics(),
    /^answer_seconds_bucket\{le="\+Inf",operation="listPets",method="GET",status="200"\} 4$/m,
  );
});

test('Durations kept by series write what prom-client’s Histogram writes; a series never observed is absent', async () => {
  const ours = new Registry();
  const durations = new Durations(BUCKETS);
  durations.register(ours, { name: 'task_seconds', help: 'Task time.' });
  const seriesOf = (method: string, outcome: string) =>
    durations.series(`${method} ${outcome}`, () => ({ method, outcome }));
  const series = { listOk: seriesOf('list', 'ok'), listError: seriesOf('list', 'error'), addOk: seriesOf('add', 'ok') };
  seriesOf('add', 'error'); // made, never observed
  const theirs = new Registry();
  const histogram = new Histogram({
    name: 'task_seconds',
    help: 'Task time.',
    labelNames: ['method', 'outcome'] as const,
    buckets: BUCKETS,
    registers: [theirs],
  });
  const observed: [keyof typeof series, string, string, number][] = [
    ['listOk', 'list', 'ok', 0.0005],
    ['listError', 'list', 'error', 0.02],
    ['listOk', 'list', 'ok', 0.5],
    ['addOk', 'add', 'ok', 0.001],
  ];
  for (const [name, method, outcome, seconds] of observed) {
    series[name].observe(seconds);
    histogram.observe({ method, outcome }, seconds);
  }
  assert.equal(await ours.metrics(), await theirs.metrics());
  assert.deepEqual(await ours.getMetricsAsJSON(), await theirs.getMetricsAsJSON());
  assert.doesNotMatch(await ours.metrics(), /outcome="error",method="add"|method="add",outcome="error"/);
  assert.match(await ours.metrics(), /^task_seconds_count\{method="list",outcome="ok"\} 2$/m);
});
