import { format } from 'node:util';
import { context, diag, propagation, SpanKind, SpanStatusCode, trace, type DiagLogFunction } from '@opentelemetry/api';
import type { ReadableSpan, SpanExporter, SpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { Config } from './config.js';
import { version } from './version.js';

// docs/operations.md#tracing: the standard OTEL_* variables, read by the SDK itself where
// it reads them (the OTLP exporter's endpoint, headers, timeout and compression; the resource's
// OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES), by config.ts for the batch span processor's
// OTEL_BSP_* and here for the rest (docs/configuration.md).

/** Whether `env` turns tracing on: an OTLP endpoint set, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none. */
export function tracingWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false;
  if (env.OTEL_TRACES_EXPORTER?.trim().toLowerCase() === 'none') return false;
  return Boolean(env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim());
}

/** The batch span processor's settings, read with the others (config.ts: the OTEL_BSP_* variables). */
export type SpanBatchSettings = Pick<
  Config,
  'spanQueueSize' | 'spanBatchSize' | 'spanScheduleDelayMs' | 'spanExportTimeoutMs'
>;

let provider: TracerProvider | undefined;

/**
 * Keeps a failed span's status code and drops its description: it is an error's message, which
 * may quote what the caller sent (docs/operations.md#tracing: no span carries a key or a body).
 */
const withoutErrorText: SpanProcessor = {
  onStart: () => {},
  onEnding: (span) => {
    if (span.status.message !== undefined) span.setStatus({ code: span.status.code });
  },
  onEnd: () => {},
  forceFlush: async () => {},
  shutdown: async () => {},
};

/**
 * `span` as exported: a server span answered with a status below 500 carries no error status.
 * OpenTelemetry's HTTP semantic conventions: a 4xx is the client's mistake, so a server span is
 * an error only for a 5xx. Fastify's instrumentation marks every request whose hooks threw
 * (a 401, a 400) as failed, and a span's status can no longer be unset once set.
 */
export function serverStatus(span: ReadableSpan): ReadableSpan {
  if (span.kind !== SpanKind.SERVER || span.status.code !== SpanStatusCode.ERROR) return span;
  const answered = span.attributes['http.response.status_code'];
  if (typeof answered !== 'number' || answered >= 500) return span;
  return {
    name: span.name,
    kind: span.kind,
    spanContext: () => span.spanContext(),
    parentSpanContext: span.parentSpanContext,
    startTime: span.startTime,
    endTime: span.endTime,
    status: { code: SpanStatusCode.UNSET },
    attributes: span.attributes,
    links: span.links,
    events: span.events,
    duration: span.duration,
    ended: span.ended,
    resource: span.resource,
    instrumentationScope: span.instrumentationScope,
    droppedAttributesCount: span.droppedAttributesCount,
    droppedEventsCount: span.droppedEventsCount,
    droppedLinksCount: span.droppedLinksCount,
  };
}

/** `exporter`, sending each span as serverStatus leaves it. */
export function withServerStatus(exporter: SpanExporter): SpanExporter {
  return {
    export: (spans, done) => exporter.export(spans.map(serverStatus), done),
    shutdown: () => exporter.shutdown(),
    forceFlush: async () => exporter.forceFlush?.(),
  };
}

/** Whether startTracing turned tracing on in this process. */
export function tracingOn(): boolean {
  return provider !== undefined;
}

/**
 * Starts the OpenTelemetry SDK when `env` asks for it (tracingWanted), before the store is
 * opened: the PostgreSQL client's instrumentation must be in place before `pg` is loaded.
 * Spans leave through a batch processor with a bounded queue (`batch`, the OTEL_BSP_* settings),
 * so an exporter that is slow or whose collector is down never holds a request and never holds
 * more than the queue and the batch in flight: past the queue's size, spans are dropped.
 * When tracing is off no part of the SDK is loaded and no provider is registered: the
 * OpenTelemetry API then hands out no-op tracers, and the request path has no tracing hook.
 */
export async function startTracing(batch: SpanBatchSettings, env: NodeJS.ProcessEnv = process.env): Promise<boolean> {
  if (provider || !tracingWanted(env)) return tracingOn();
  const [sdk, core, { AsyncLocalStorageContextManager }, { OTLPTraceExporter }, resources, instrumentation, pg] =
    await Promise.all([
      import('@opentelemetry/sdk-trace'),
      import('@opentelemetry/core'),
      import('@opentelemetry/context-async-hooks'),
      import('@opentelemetry/exporter-trace-otlp-http'),
      import('@opentelemetry/resources'),
      import('@opentelemetry/instrumentation'),
      import('@opentelemetry/instrumentation-pg'),
    ]);
  const level = core.diagLogLevelFromString(env.OTEL_LOG_LEVEL);
  if (env.OTEL_LOG_LEVEL && level !== undefined) {
    // Standard error: standard output holds the request log's JSON lines.
    const write: DiagLogFunction = (message, ...args) =>
      void process.stderr.write(`opentelemetry: ${format(message, ...args)}\n`);
    diag.setLogger({ error: write, warn: write, info: write, debug: write, verbose: write }, level);
  }

  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': 'petstore', 'service.version': version }))
    .merge(resources.detectResources({ detectors: [resources.envDetector] }));
  provider = new sdk.TracerProvider({
    resource,
    sampler: samplerOf(sdk, env),
    spanProcessors: [
      withoutErrorText,
      new sdk.BatchSpanProcessor({
        exporter: withServerStatus(new OTLPTraceExporter()),
        scheduledDelayMillis: batch.spanScheduleDelayMs,
        exportTimeoutMillis: batch.spanExportTimeoutMs,
        maxQueueSize: batch.spanQueueSize,
        maxExportBatchSize: batch.spanBatchSize,
      }),
    ],
  });
  context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  // W3C Trace Context: an incoming traceparent continues the caller's trace (docs/operations.md#tracing).
  propagation.setGlobalPropagator(
    new core.CompositePropagator({
      propagators: [new core.W3CTraceContextPropagator(), new core.W3CBaggagePropagator()],
    }),
  );
  trace.setGlobalTracerProvider(provider);
  // Query text only: parameter values (key hashes, pet fields) are never attributes.
  instrumentation.registerInstrumentations({
    instrumentations: [new pg.PgInstrumentation({ requireParentSpan: true, enhancedDatabaseReporting: false })],
  });
  return true;
}

type Sdk = typeof import('@opentelemetry/sdk-trace');

/** OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG; parentbased_always_on by default. */
function samplerOf(sdk: Sdk, env: NodeJS.ProcessEnv) {
  const ratio = Number(env.OTEL_TRACES_SAMPLER_ARG ?? '1');
  const share = new sdk.TraceIdRatioBasedSampler(Number.isFinite(ratio) && ratio >= 0 && ratio <= 1 ? ratio : 1);
  const roots = { always_on: new sdk.AlwaysOnSampler(), always_off: new sdk.AlwaysOffSampler(), traceidratio: share };
  const name = env.OTEL_TRACES_SAMPLER?.trim().toLowerCase() || 'parentbased_always_on';
  const own = name.startsWith('parentbased_') ? name.slice('parentbased_'.length) : name;
  const root = roots[own as keyof typeof roots] ?? roots.always_on;
  return name.startsWith('parentbased_') ? new sdk.ParentBasedSampler({ root }) : root;
}

/**
 * Exports the spans still queued and stops the SDK, within `timeoutMs` (docs/operations.md#tracing: spans are
 * flushed on shutdown; a collector that is down does not hold the exit past that). Never rejects.
 */
export async function stopTracing(timeoutMs: number): Promise<void> {
  const stopping = provider;
  provider = undefined;
  if (!stopping) return;
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeoutMs);
  });
  await Promise.race([stopping.shutdown().catch(() => {}), late]);
  clearTimeout(timer);
}
