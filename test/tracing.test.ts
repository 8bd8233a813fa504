import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { test, type TestContext } from 'node:test';
import { ConfigError, loadConfig } from '../src/config.js';
import { tracingWanted } from '../src/tracing.js';
import { callerTrace, descendsFrom, startReceiver, startSilentCollector, type ReceivedSpan } from './otlp.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, startServer, type Server } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

// docs/operations.md#tracing.

const SERVER = 2; // OTLP SpanKind: SPAN_KIND_SERVER

/** Migrates a new database and issues a key, then starts `petstore serve` with `extra` in its environment. */
async function serveWithKey(t: TestContext, extra: Record<string, string>, base = childEnv(t)) {
  const env = { ...base, ...extra };
  await migrateDatabase(env);
  const created = await runKeys(['create', '--name', 'tracing', '--json'], env);
  const { key } = JSON.parse(created.stdout) as { key: string };
  return { key, server: await startServer(t, env) };
}

async function call(server: Server, key: string, path: string, init: RequestInit = {}) {
  const response = await fetch(`${server.url}/v1${path}`, {
    ...init,
    headers: { authorization: `Bearer ${key}`, ...(init.headers as Record<string, string>) },
  });
  return { status: response.status, body: await response.text() };
}

async function stop(server: Server) {
  server.child.kill('SIGTERM');
  return server.exited;
}

/** Creates a pet, lists pets and reads the pet, each as a caller's span; checks the spans exported. */
async function checkTracedRequests(t: TestContext, base?: Record<string, string>) {
  const receiver = await startReceiver(t);
  const { key, server } = await serveWithKey(
    t,
    { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '100' },
    base,
  );
  const secretName = `Zq${Date.now().toString(36)}Name`;
  const traces = { createPet: callerTrace(), listPets: callerTrace(), getPet: callerTrace() };

  const created = await call(server, key, '/pets', {
    method: 'POST',
    headers: { 'content-type': 'application/json', traceparent: traces.createPet.traceparent },
    body: JSON.stringify({ name: secretName, categoryId: 7 }),
  });
  assert.equal(created.status, 201, created.body);
  const { id } = JSON.parse(created.body) as { id: string };
  assert.equal(
    (await call(server, key, '/pets?limit=5', { headers: { traceparent: traces.listPets.traceparent } })).status,
    200,
  );
  assert.equal(
    (await call(server, key, `/pets/${id}`, { headers: { traceparent: traces.getPet.traceparent } })).status,
    200,
  );

  // A 400 whose message quotes the query parameter's name: the span says it failed, not the text.
  const refused = await call(server, key, `/pets?${secretName}=1`);
  assert.equal(refused.status, 400);
  assert.ok(refused.body.includes(secretName));

  const routes = { createPet: 'POST /v1/pets', listPets: 'GET /v1/pets', getPet: 'GET /v1/pets/:petId' };
  const serverSpans: Record<string, ReceivedSpan> = {};
  for (const [operation, caller] of Object.entries(traces)) {
    const name = routes[operation as keyof typeof routes];
    const span = await receiver.waitForSpan((span) => span.traceId === caller.traceId && span.kind === SERVER);
    assert.equal(span.name, name);
    assert.equal(span.parentSpanId, caller.spanId, `${name} continues the caller's span`);
    assert.equal(span.attributes['http.route'], name.split(' ')[1]);
    const store = await receiver.waitForSpan(
      (candidate) => candidate.traceId === caller.traceId && candidate.name === `store.${operation}`,
    );
    assert.ok(descendsFrom(store, span, receiver.spans()), `store.${operation} is under the server span`);
    assert.ok(['sqlite', 'postgresql'].includes(String(store.attributes['db.system.name'])));
    serverSpans[operation] = span;
  }

  // The request's log line carries the server span's ids.
  const getPet = serverSpans.getPet!;
  const [line] = await server.waitForOutput(new RegExp(`\\{[^\\n]*"trace_id":"${getPet.traceId}"[^\\n]*\\}`));
  const logged = JSON.parse(line) as Record<string, unknown>;
  assert.equal(logged.msg, 'request completed');
  assert.equal(logged.span_id, getPet.spanId);
  assert.equal(logged.operation, 'getPet');

  // Nothing secret or sent by the caller in any export.
  assert.equal((await stop(server)).code, 0);
  const exported = receiver.payloads().join('\n');
  assert.ok(exported.length > 0);
  assert.ok(!exported.includes(key), 'no API key');
  assert.ok(!exported.toLowerCase().includes('authorization'), 'no Authorization header');
  assert.ok(!exported.includes(secretName), 'no request body, no error message quoting the request');
  assert.ok(!exported.includes('limit=5'), 'no query string');
  return receiver;
}

test('each request is a server span named by its route, continuing the caller traceparent, with store spans under it (SQLite)', async (t) => {
  await checkTracedRequests(t);
});

test(
  'each request is a server span with store and PostgreSQL query spans under it (PostgreSQL)',
  { skip: postgresSkip },
  async (t) => {
    const receiver = await checkTracedRequests(t, childEnv(t, { DATABASE_URL: await createPostgresSchema(t) }));
    const queries = receiver
      .spans()
      .filter((span) => span.attributes['db.system.name'] === 'postgresql' && span.name.startsWith('pg.query'));
    assert.ok(queries.length > 0, 'PostgreSQL queries are spans');
    const server = receiver.spans().find((span) => span.name === 'GET /v1/pets/:petId')!;
    assert.ok(queries.some((query) => descendsFrom(query, server, receiver.spans())));
  },
);

/**
 * A read, a refused key and an unknown path, each as a caller's span, then SIGTERM once the
 * rate-count batch (200 ms, src/http/rate-counters.ts) has run: the batches the read set off
 * (rate counts, its key's last use) are none of its spans, and no 4xx server span is an error.
 */
async function checkBackgroundWork(t: TestContext, base?: Record<string, string>) {
  const receiver = await startReceiver(t);
  const { key, server } = await serveWithKey(
    t,
    { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url, OTEL_BSP_SCHEDULE_DELAY: '100' },
    base,
  );
  const read = callerTrace();
  const refused = callerTrace();
  const unknown = callerTrace();
  for (let i = 0; i < 3; i++) {
    assert.equal((await call(server, key, '/pets', { headers: { traceparent: read.traceparent } })).status, 200);
  }
  assert.equal(
    (await call(server, 'psk_wrong', '/pets', { headers: { traceparent: refused.traceparent } })).status,
    401,
  );
  assert.equal((await call(server, key, '/nowhere', { headers: { traceparent: unknown.traceparent } })).status, 404);
  await sleep(600);
  assert.equal((await stop(server)).code, 0);

  const inTrace = (caller: { traceId: string }) => receiver.spans().filter((span) => span.traceId === caller.traceId);
  const names = inTrace(read).map((span) => span.name);
  assert.ok(names.includes('store.listPets'), `the read's own work is in its trace: ${names.join(', ')}`);
  for (const name of names) {
    assert.doesNotMatch(name, /addHits|writeHits|KeyUses|DeprecatedUses/, `${name} is batch work in a request's trace`);
  }
  for (const caller of [refused, unknown]) {
    const [span] = inTrace(caller).filter((candidate) => candidate.kind === SERVER);
    assert.ok(span, 'the 4xx has its server span');
    assert.equal(
      span.status,
      0,
      `${span.name} ${String(span.attributes['http.response.status_code'])} is not an error`,
    );
  }
  return receiver;
}

test('batched writes are in no request trace, and a 4xx server span is no error (SQLite)', async (t) => {
  const receiver = await checkBackgroundWork(t);
  assert.ok(!receiver.spans().some((span) => span.name === 'store.addHits'), 'the batch makes no span');
});

test(
  'batched writes are in no request trace, and a 4xx server span is no error (PostgreSQL)',
  { skip: postgresSkip },
  async (t) => {
    const receiver = await checkBackgroundWork(t, childEnv(t, { DATABASE_URL: await createPostgresSchema(t) }));
    const batchWork = receiver.spans().filter((span) => /addHits|writeHits|KeyUses/.test(span.name));
    assert.deepEqual(
      batchWork.map((span) => span.name),
      [],
      'the batches make no span',
    );
  },
);

test('spans of the last request are flushed on SIGTERM', async (t) => {
  const receiver = await startReceiver(t);
  // A schedule far longer than the test: only the shutdown's flush can send the span.
  const { key, server } = await serveWithKey(t, {
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
    OTEL_BSP_SCHEDULE_DELAY: '600000',
  });
  const caller = callerTrace();
  assert.equal((await call(server, key, '/pets', { headers: { traceparent: caller.traceparent } })).status, 200);
  assert.equal((await stop(server)).code, 0);
  const span = receiver.spans().find((span) => span.traceId === caller.traceId && span.kind === SERVER);
  assert.equal(span?.name, 'GET /v1/pets');
});

/** Sends `count` reads one after another; the milliseconds they took. */
async function timeReads(server: Server, key: string, count: number): Promise<number> {
  const started = performance.now();
  for (let i = 0; i < count; i++) assert.equal((await call(server, key, '/pets?limit=5')).status, 200);
  return performance.now() - started;
}

test('a collector that never answers neither slows requests nor holds SIGTERM past the drain bound', async (t) => {
  const collector = await startSilentCollector(t);
  const off = await serveWithKey(t, {});
  const on = await serveWithKey(t, { OTEL_EXPORTER_OTLP_ENDPOINT: collector.url, OTEL_BSP_SCHEDULE_DELAY: '20' });
  await timeReads(off.server, off.key, 20);
  await timeReads(on.server, on.key, 20);
  const offMs = await timeReads(off.server, off.key, 200);
  const onMs = await timeReads(on.server, on.key, 200);
  assert.ok(collector.connections() > 0, 'the service tried to export');
  // Generous: tracing's own work may cost something; a request waiting on the collector costs seconds.
  assert.ok(onMs < offMs * 4 + 2000, `200 reads: ${onMs} ms traced, ${offMs} ms untraced`);
  assert.equal((await stop(off.server)).code, 0);

  const stopping = performance.now();
  const { code } = await stop(on.server);
  // server.ts's drain bound (10 s, docs/operations.md), past which it exits 1.
  assert.equal(code, 0);
  assert.ok(performance.now() - stopping < 10_000);
});

test('with no endpoint set, tracing is off and the log line has no trace_id', async (t) => {
  const { key, server } = await serveWithKey(t, {});
  const caller = callerTrace();
  assert.equal((await call(server, key, '/pets', { headers: { traceparent: caller.traceparent } })).status, 200);
  const [line] = await server.waitForOutput(/\{[^\n]*"request completed"[^\n]*\}/);
  assert.equal((JSON.parse(line) as Record<string, unknown>).operation, 'listPets');
  assert.ok(!line.includes('trace_id') && !line.includes('span_id'));
  assert.equal((await stop(server)).code, 0);
});

test('OTEL_SDK_DISABLED=true turns tracing off even with an endpoint', async (t) => {
  const receiver = await startReceiver(t);
  const { key, server } = await serveWithKey(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_BSP_SCHEDULE_DELAY: '20',
    OTEL_SDK_DISABLED: 'true',
  });
  assert.equal((await call(server, key, '/pets')).status, 200);
  const [line] = await server.waitForOutput(/\{[^\n]*"request completed"[^\n]*\}/);
  assert.ok(!line.includes('trace_id'));
  assert.equal((await stop(server)).code, 0);
  assert.deepEqual(receiver.payloads(), []);
});

test('tracingWanted reads the standard variables', () => {
  assert.equal(tracingWanted({}), false);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' }), true);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://127.0.0.1:4318/v1/traces' }), true);
  assert.equal(tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ' }), false);
  assert.equal(
    tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'TRUE' }),
    false,
  );
  assert.equal(
    tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_SDK_DISABLED: 'false' }),
    true,
  );
  assert.equal(
    tracingWanted({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318', OTEL_TRACES_EXPORTER: 'none' }),
    false,
  );
});

test('the OTEL_BSP_* settings have small defaults and bounds, and a bad value names its variable', () => {
  const defaults = loadConfig({});
  assert.deepEqual(
    [defaults.spanQueueSize, defaults.spanBatchSize, defaults.spanScheduleDelayMs, defaults.spanExportTimeoutMs],
    [1024, 256, 1000, 10_000],
  );
  assert.equal(loadConfig({ OTEL_BSP_MAX_QUEUE_SIZE: '100' }).spanBatchSize, 100, 'the batch fits the queue');
  const set = loadConfig({ OTEL_BSP_MAX_QUEUE_SIZE: '4096', OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '4096' });
  assert.deepEqual([set.spanQueueSize, set.spanBatchSize], [4096, 4096]);
  for (const [name, value] of [
    ['OTEL_BSP_MAX_QUEUE_SIZE', '0'],
    ['OTEL_BSP_MAX_QUEUE_SIZE', 'many'],
    ['OTEL_BSP_MAX_EXPORT_BATCH_SIZE', '2048'],
    ['OTEL_BSP_SCHEDULE_DELAY', '-1'],
    ['OTEL_BSP_EXPORT_TIMEOUT', '1.5'],
  ] as const) {
    assert.throws(
      () => loadConfig({ [name]: value }),
      (error: Error) => error instanceof ConfigError && error.message.startsWith(`${name} must be`),
      `${name}=${value}`,
    );
  }
});

test('spans leave in batches of OTEL_BSP_MAX_EXPORT_BATCH_SIZE, a full batch at once', async (t) => {
  const receiver = await startReceiver(t);
  // A delay far longer than the test: only full batches are sent before the shutdown's flush.
  const { key, server } = await serveWithKey(t, {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_BSP_MAX_QUEUE_SIZE: '8',
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2',
    OTEL_BSP_SCHEDULE_DELAY: '600000',
  });
  for (let i = 0; i < 3; i++) assert.equal((await call(server, key, '/pets')).status, 200);
  await receiver.waitForSpan((span) => span.kind === SERVER);
  assert.equal((await stop(server)).code, 0);
  const sizes = receiver
    .payloads()
    .map((payload) => (payload.match(/"spanId"/g) ?? []).length)
    .filter((size) => size > 0);
  assert.ok(sizes.length >= 2, `several exports: ${sizes.join(', ')}`);
  assert.ok(
    sizes.every((size) => size <= 2),
    `no export holds more than 2 spans: ${sizes.join(', ')}`,
  );
});
