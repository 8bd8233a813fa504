import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
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
