import assert from 'node:assert/strict';
import { test } from 'node:test';
import { callerTrace, startReceiver as startCollector } from './otlp.js';
import { childEnv, runCli, startServer } from './process.js';
import { startReceiver } from './webhooks.js';

const CLIENT = 3; // OTLP SpanKind: SPAN_KIND_CLIENT

test('with tracing on, each webhook attempt is a client span of its own trace that sends traceparent', async (t) => {
  const collector = await startCollector(t);
  const receiver = await startReceiver(t);
  const env = childEnv(t, {
    PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
  assert.equal((await runCli(['migrate'], env)).code, 0);
  const { key } = JSON.parse((await runCli(['keys', 'create', '--name', 'test', '--json'], env)).stdout) as {
    key: string;
  };
  const added = await runCli(['webhooks', 'add', `${receiver.url}?token=Zq7secretToken`, '--json'], env);
  const { secret } = JSON.parse(added.stdout) as { secret: string };
  const server = await startServer(t, env);
  const caller = callerTrace();
  const created = await fetch(`${server.url}/v1/pets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', traceparent: caller.traceparent },
    body: '{"name":"Rex","categoryId":1}',
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
