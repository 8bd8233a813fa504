import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test } from 'node:test';
import { context, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import Database from 'better-sqlite3';
import { batchedCounters } from '../src/http/rate-counters.js';
import { groupCalls } from '../src/store/batches.js';
import { groupCommits } from '../src/store/group-commit.js';
import { InstrumentedStore } from '../src/store/instrumented.js';
import { batchKeyUses } from '../src/keys/uses.js';
import { withServerStatus } from '../src/tracing.js';
import { tempSqliteStore } from './helpers.js';

// docs/operations.md#tracing: work the service does in batches is no request's child span, and
// a server span is an error only for a 5xx. The SDK is registered in this file's own process,
// as src/tracing.ts registers it in the service's.
const exported = new InMemorySpanExporter();
const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(
  new TracerProvider({
    spanProcessors: [
      new SimpleSpanProcessor({ exporter }),
      new SimpleSpanProcessor({ exporter: withServerStatus(exported) }),
    ],
  }),
);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const tracer = trace.getTracer('test');

/** Runs `work` as a request would: inside a server span of its own, ended when `work` returns. */
function inRequest<T>(work: () => T): { span: Span; result: T } {
  const span = tracer.startSpan('GET /v1/pets', { kind: SpanKind.SERVER });
  try {
    return { span, result: context.with(trace.setSpan(ROOT_CONTEXT, span), work) };
  } finally {
    span.end();
  }
}

/** Waits, 2 s at most, until `done` says so. */
async function until(done: () => boolean): Promise<void> {
  for (let round = 0; round < 200 && !done(); round++) await sleep(10);
  assert.ok(done(), 'within 2 s');
}

test('a rate-count batch a request set off runs outside its trace: no store.addHits span under it', async (t) => {
  exporter.reset();
  const { store: plain } = await tempSqliteStore(t);
  const store = new InstrumentedStore(plain, () => {});
  const active: (Span | undefined)[] = [];
  const counters = batchedCounters((...batch) => {
    active.push(trace.getActiveSpan());
    return store.addHits(...batch);
  }, 5);
  const { span, result } = inRequest(() => counters.countHit('key:1', 0));
  assert.equal(result, 1);
  await until(() => active.length > 0);
  await counters.close();
  assert.deepEqual(active, [undefined], 'the batch ran in the root context');
  const spans = exporter.getFinishedSpans();
  assert.deepEqual(
    spans.filter((finished) => finished.spanContext().traceId === span.spanContext().traceId).map((s) => s.name),
    ['GET /v1/pets'],
    'the request has no child span from the batch',
  );
  assert.equal(spans.filter((finished) => finished.name === 'store.addHits').length, 0, 'nor a span of its own');
});

test('a key-use batch a request set off runs in the root context', async () => {
  const active: (Span | undefined)[] = [];
  const uses = batchKeyUses(() => void active.push(trace.getActiveSpan()), 5);
  inRequest(() => uses.note(7, Date.now()));
  await until(() => active.length > 0);
  assert.deepEqual(active, [undefined]);
  // Noted again from a request, after the minute: the next batch is outside it too.
  inRequest(() => uses.note(7, Date.now() + 61_000));
  await until(() => active.length > 1);
  assert.deepEqual(active, [undefined, undefined]);
  await uses.close();
});

test('grouped calls of several requests run in the root context; a call alone runs in its own', async () => {
  const active: (Span | undefined)[] = [];
  const double = groupCalls(async (inputs: number[]) => {
    active.push(trace.getActiveSpan());
    return inputs.map((input) => ({ status: 'fulfilled', value: input * 2 }) as const);
  });
  const [a, b] = [inRequest(() => double.call(1)), inRequest(() => double.call(2))];
  assert.deepEqual(await Promise.all([a.result, b.result]), [2, 4]);
  assert.deepEqual(active, [undefined], 'one batch, in no request');
  const alone = inRequest(() => double.call(3));
  assert.equal(await alone.result, 6);
  assert.equal(active[1], alone.span, "a batch of one is its caller's work");
});

test('a group commit of several requests runs in the root context; a commit of one in its own', async (t) => {
  const db = new Database(':memory:');
  t.after(() => db.close());
  db.exec('CREATE TABLE t (v INTEGER)');
  const insert = db.prepare('INSERT INTO t (v) VALUES (?)');
  const active: (Span | undefined)[] = [];
  const write = groupCommits(
    db,
    (v: number) => {
      active.push(trace.getActiveSpan());
      return insert.run(v).changes;
    },
    { oneStatementEach: true },
  );
  const calls = [inRequest(() => write.call(1)), inRequest(() => write.call(2))];
  assert.deepEqual(await Promise.all(calls.map((call) => call.result)), [1, 1]);
  assert.deepEqual(active, [undefined, undefined]);
  const alone = inRequest(() => write.call(3));
  assert.equal(await alone.result, 1);
  assert.equal(active[2], alone.span);
});

test('a server span is exported as an error for a 5xx only, as the HTTP semantic conventions advise', () => {
  exported.reset();
  const end = (kind: SpanKind, status: number) => {
    const span = tracer.startSpan(`answered ${status}`, { kind });
    span.setAttribute('http.response.status_code', status);
    span.setStatus({ code: SpanStatusCode.ERROR });
    span.end();
  };
  end(SpanKind.SERVER, 401);
  end(SpanKind.SERVER, 404);
  end(SpanKind.SERVER, 429);
  end(SpanKind.SERVER, 500);
  end(SpanKind.SERVER, 503);
  end(SpanKind.CLIENT, 404);
  const statusOf = Object.fromEntries(
    exported.getFinishedSpans().map((span) => [`${span.kind} ${span.name}`, span.status.code]),
  );
  assert.deepEqual(statusOf, {
    [`${SpanKind.SERVER} answered 401`]: SpanStatusCode.UNSET,
    [`${SpanKind.SERVER} answered 404`]: SpanStatusCode.UNSET,
    [`${SpanKind.SERVER} answered 429`]: SpanStatusCode.UNSET,
    [`${SpanKind.SERVER} answered 500`]: SpanStatusCode.ERROR,
    [`${SpanKind.SERVER} answered 503`]: SpanStatusCode.ERROR,
    [`${SpanKind.CLIENT} answered 404`]: SpanStatusCode.ERROR,
  });
  const [first] = exported.getFinishedSpans();
  assert.equal(first!.spanContext().spanId.length, 16, 'the exported span keeps its ids');
  assert.ok(first!.ended);
});
