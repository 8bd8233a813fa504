import { randomBytes } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import type { TestContext } from 'node:test';

/** A span as an OTLP/HTTP JSON export carries it: ids in hex, attributes flattened to their values. */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  /** The status code: 0 unset, 1 ok, 2 error. */
  status: number;
  attributes: Record<string, unknown>;
}

interface OtlpValue {
  stringValue?: string;
  intValue?: number | string;
  doubleValue?: number;
  boolValue?: boolean;
}
interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  kind: number;
  status?: { code?: number };
  attributes?: { key: string; value: OtlpValue }[];
}
interface OtlpExport {
  resourceSpans?: { scopeSpans?: { spans?: OtlpSpan[] }[] }[];
}

const valueOf = (value: OtlpValue) => value.stringValue ?? value.intValue ?? value.doubleValue ?? value.boolValue;

export interface Receiver {
  /** The base address, as OTEL_EXPORTER_OTLP_ENDPOINT takes it. */
  url: string;
  /** Every span received so far. */
  spans: () => ReceivedSpan[];
  /** Every export's body as received, to search for what must not be in it. */
  payloads: () => string[];
  /** Waits up to `timeoutMs` for a span `matches` accepts. */
  waitForSpan: (matches: (span: ReceivedSpan) => boolean, timeoutMs?: number) => Promise<ReceivedSpan>;
}

/** An OTLP/HTTP receiver on loopback that accepts JSON trace exports at /v1/traces; closed after the test. */
export async function startReceiver(t: TestContext): Promise<Receiver> {
  const spans: ReceivedSpan[] = [];
  const payloads: string[] = [];
  const server = createHttpServer((request, response) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk) => (body += chunk));
    request.on('end', () => {
      payloads.push(body);
      if (request.url === '/v1/traces' && request.headers['content-type']?.startsWith('application/json')) {
        const decoded = JSON.parse(body) as OtlpExport;
        for (const resource of decoded.resourceSpans ?? []) {
          for (const scope of resource.scopeSpans ?? []) {
            for (const span of scope.spans ?? []) {
              spans.push({
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId ?? '',
                name: span.name,
                kind: span.kind,
                status: span.status?.code ?? 0,
                attributes: Object.fromEntries((span.attributes ?? []).map(({ key, value }) => [key, valueOf(value)])),
              });
            }
          }
        }
      }
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    spans: () => [...spans],
    payloads: () => [...payloads],
    waitForSpan: async (matches, timeoutMs = 10_000) => {
      const deadline = Date.now() + timeoutMs;
      for (let round = 0; round < 1000; round++) {
        const found = spans.find(matches);
        if (found) return found;
        if (Date.now() > deadline) break;
        await sleep(20);
      }
      throw new Error(`no such span arrived; received: ${spans.map((span) => span.name).join(', ')}`);
    },
  };
}

/** A collector that accepts connections and never answers; closed after the test. */
export async function startSilentCollector(t: TestContext): Promise<{ url: string; connections: () => number }> {
  const sockets = new Set<Socket>();
  let accepted = 0;
  const server = createTcpServer((socket) => {
    accepted += 1;
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, connections: () => accepted };
}

/** A W3C traceparent for a caller's sampled span, with its trace and span ids. */
export function callerTrace(): { traceId: string; spanId: string; traceparent: string } {
  const traceId = randomBytes(16).toString('hex');
  const spanId = randomBytes(8).toString('hex');
  return { traceId, spanId, traceparent: `00-${traceId}-${spanId}-01` };
}

/** Whether `span` descends from `ancestor` among `spans` (its parent, or its parent's, …). */
export function descendsFrom(span: ReceivedSpan, ancestor: ReceivedSpan, spans: ReceivedSpan[]): boolean {
  let current: ReceivedSpan | undefined = span;
  for (let depth = 0; current && depth < 16; depth++) {
    if (current.parentSpanId === ancestor.spanId) return true;
    const parentId: string = current.parentSpanId;
    current = spans.find((candidate) => candidate.spanId === parentId);
  }
  return false;
}
