import assert from 'node:assert/strict';
import { test } from 'node:test';
import { callerTrace, startReceiver as startCollector } from './otlp.js';
import { childEnv, startServer } from './process.js';
import { createPetAt, prepareDatabase, startReceiver } from './webhooks.js';

const CLIENT = 3; // OTLP SpanKind: SPAN_KIND_CLIENT

test('with tracing on, each webhook attempt is a client span of its own trace that sends traceparent', async (t) => {
  const collector = await startCollector(t);
  const receiver = await startReceiver(t);
  const env = childEnv(t, {
    PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
  const { key, secret } = await prepareDatabase(env, `${receiver.url}?token=Zq7secretToken`);
  const server = await startServer(t, env);
  const caller = callerTrace();
  const created = await createPetAt(server.url, key, '{"name":"Rex","categoryId":1}', {
    traceparent: caller.traceparent,
  });
  assert.equal(created.status, 201);
  const [delivered] = await receiver.waitFor(1);
  const match = /^00-([0-9a-f]{32})-([0-9a-f]{16})-01$/.exec(String(delivered!.headers.traceparent));
  assert.ok(match, `traceparent ${delivered!.headers.traceparent}`);
  const span = await collector.waitForSpan((s) => s.spanId === match[2]);
  assert.equal(span.kind, CLIENT);
  assert.equal(span.name, 'POST webhook');
  assert.equal(span.traceId, match[1]);
  assert.notEqual(span.traceId, caller.traceId, 'not part of the request that created the pet');
  assert.equal(span.parentSpanId || '', '');
  assert.equal(span.attributes['server.address'], '127.0.0.1');
  assert.equal(span.attributes['http.response.status_code'], 204);
  assert.equal(span.attributes['petstore.event.id'], delivered!.headers['webhook-id']);
  server.child.kill('SIGTERM');
  await server.exited;
  const exported = collector.payloads().join('\n');
  assert.ok(!exported.includes('Zq7secretToken'), 'no URL query in a span');
  assert.ok(!exported.includes(secret.slice(6, 20)), 'no secret in a span');
});
