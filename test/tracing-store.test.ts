import assert from 'node:assert/strict';
import { test } from 'node:test';
import { context, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { InMemorySpanExporter, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { InstrumentedStore } from '../src/store/instrumented.js';
import { storeFailingLists, tempSqliteStore } from './helpers.js';

// docs/operations.md#tracing: a request's database work is child spans of it. The SDK is
// registered in this test file's own process, as src/tracing.ts registers it in the service's.
const exporter = new InMemorySpanExporter();
trace.setGlobalTracerProvider(new TracerProvider({ spanProcessors: [new SimpleSpanProcessor({ exporter })] }));
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
const requests = trace.getTracer('test');

test('a Store call inside a traced request is a store.<method> span under it', async (t) => {
  exporter.reset();
  const { store: plain } = await tempSqliteStore(t);
  const store = new InstrumentedStore(plain, () => {}, 'sqlite');
  const request = requests.startSpan('GET /v1/pets/:petId');
  await context.with(trace.setSpan(context.active(), request), () => store.getPet(1n));
  request.end();
  const [span] = exporter.getFinishedSpans().filter((finished) => finished.name === 'store.getPet');
  assert.ok(span);
  assert.equal(span.parentSpanContext?.spanId, request.spanContext().spanId);
  assert.equal(span.kind, SpanKind.CLIENT);
  assert.equal(span.attributes['db.system.name'], 'sqlite');
  assert.equal(span.status.code, SpanStatusCode.UNSET);
});

test('a Store call outside any request (background work, tracing off) makes no span', async (t) => {
  exporter.reset();
  const { store: plain } = await tempSqliteStore(t);
  const store = new InstrumentedStore(plain, () => {}, 'sqlite');
  await store.listPets({ limit: 5 });
  await store.countPetsByStatus();
  assert.deepEqual(exporter.getFinishedSpans(), []);
});

test('a failed Store call ends its span as an error, with the error class and no message', async (t) => {
  exporter.reset();
  const { store: plain, failing } = await storeFailingLists(t);
  const store = new InstrumentedStore(plain, () => {}, 'postgresql');
  failing.on = true;
  const request = requests.startSpan('GET /v1/pets');
  await assert.rejects(
    context.with(trace.setSpan(context.active(), request), async () => store.listPets({ limit: 5 })),
  );
  request.end();
  const [span] = exporter.getFinishedSpans().filter((finished) => finished.name === 'store.listPets');
  assert.ok(span);
  assert.equal(span.status.code, SpanStatusCode.ERROR);
  assert.equal(span.status.message, undefined);
  assert.equal(typeof span.attributes['error.type'], 'string');
  assert.equal(span.attributes['db.system.name'], 'postgresql');
});
