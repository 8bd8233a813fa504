import { createRequire } from 'node:module';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import { collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { Scope } from '../keys/keys.js';
import { AnswerMetrics, Durations } from './durations.js';
import { petStatuses } from '../schemas.js';
import { PET_COUNTS_MAX_AGE_MS, wrapMethods, type Store } from '../store/store.js';

const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const STORE_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

let processRegistry: Registry | undefined;

// prom-client's default collectors but `gc`: its nodejs_gc_duration_seconds needs a 'gc'
// PerformanceObserver, and Node then makes an entry of every collection, kilobytes of it in the
// old generation; under load that garbage grew the benchmark's peak RSS past 100 MB
// (bench/README.md). GC pressure still shows in nodejs_heap_* and the event loop lag. Each
// collector gets the settings collectDefaultMetrics would give it.
const requireCollector = createRequire(import.meta.url);
type Collector = (registry: Registry, config: { eventLoopMonitoringPrecision: number }) => void;

function collectProcessMetrics(registry: Registry) {
  for (const name of collectDefaultMetrics.metricsList) {
    if (name === 'gc') continue;
    const collect = requireCollector(`prom-client/lib/metrics/${name}.js`) as Collector;
    collect(registry, { eventLoopMonitoringPrecision: 10 });
  }
}

// Process metrics describe the process, not an app: one set however many apps a process builds
// (tests build hundreds), each collector installed once.
function readProcessRegistry(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectProcessMetrics(processRegistry);
  }
  return processRegistry;
}

export interface Metrics {
  /** This app's metrics and the process's, in the Prometheus text format. */
  registry: Registry;
  /** petstore_http_requests_total and petstore_http_request_duration_seconds. */
  answers: AnswerMetrics;
  /** petstore_http_requests_in_flight: a plain number, read when scraped. */
  inFlight: { count: number };
  /** petstore_store_duration_seconds. */
  storeDuration: Durations;
}

/**
 * The app's metrics in a registry of its own (not prom-client's global one), so apps built in
 * one process never share or clash. `petstore_pets` is read from `store` at scrape time: running
 * counts (SQLite) or a count cached for 5 s (PostgreSQL), never a scan per scrape.
 * What is counted on every request is kept in plain numbers (durations.ts).
 */
export function createMetrics(store: Store): Metrics {
  const registry = new Registry();
  const registers = [registry];
  const answers = new AnswerMetrics(HTTP_BUCKETS);
  answers.register(
    registry,
    {
      name: 'petstore_http_request_duration_seconds',
      help: 'Time from receiving a request to sending its response, by operation, method and status.',
    },
    {
      name: 'petstore_http_requests_total',
      help: 'HTTP requests answered, by operation (operationId or route), method and status.',
    },
  );
  const inFlight = { count: 0 };
  new Gauge({
    name: 'petstore_http_requests_in_flight',
    help: 'Requests received and not yet answered.',
    registers,
    collect() {
      this.set(inFlight.count);
    },
  });
  const storeDuration = new Durations(STORE_BUCKETS);
  storeDuration.register(registry, {
    name: 'petstore_store_duration_seconds',
    help: 'Time a Store method took, by method and outcome (ok or error).',
  });
  new Gauge({
    name: 'petstore_pets',
    help: `Animals in the store by status, counted at most ${PET_COUNTS_MAX_AGE_MS / 1000} s before the scrape (exact on SQLite).`,
    labelNames: ['status'] as const,
    registers,
    // The database being down must not fail the scrape: the other metrics matter most then.
    // The series are left out instead, so a stale count is never shown as current.
    async collect() {
      try {
        const counts = await store.countPetsByStatus();
        for (const status of petStatuses) this.set({ status }, counts[status]);
      } catch {
        this.reset();
      }
    },
  });
  return {
    registry: Registry.merge([registry, readProcessRegistry()]),
    answers,
    inFlight,
    storeDuration,
  };
}

/** `store` with the time of every method call observed in `petstore_store_duration_seconds`. */
export function timeStore(store: Store, { storeDuration }: Metrics): Store {
  return wrapMethods(store, (name, method) => {
    const ok = storeDuration.series(`${name} ok`, () => ({ method: name, outcome: 'ok' }));
    const failed = storeDuration.series(`${name} error`, () => ({ method: name, outcome: 'error' }));
    // No rest parameters nor async function: no array, no extra promise per call (no method takes more than 3).
    return (a, b, c) => {
      const started = performance.now();
      return method(a, b, c).then(
        (result) => {
          ok.observe((performance.now() - started) / 1000);
          return result;
        },
        (error: unknown) => {
          failed.observe((performance.now() - started) / 1000);
          throw error;
        },
      );
    };
  });
}

/**
 * `GET /metrics` in the Prometheus text format, behind an API key with the `metrics:read` scope
 * (CONTRACT.md): Prometheus scrapes it with `authorization: { credentials: <key> }`.
 */
export function registerMetrics(
  app: FastifyInstance,
  metrics: Metrics,
  authenticate: (scope: Scope) => onRequestHookHandler,
): void {
  app.get('/metrics', { onRequest: authenticate('metrics:read'), schema: { hide: true } }, async (_request, reply) => {
    const text = await metrics.registry.metrics();
    return reply.type(metrics.registry.contentType).send(text);
  });
}
