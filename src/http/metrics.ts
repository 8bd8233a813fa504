import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { systemClock, type Clock } from '../clock.js';
import type { Scope } from '../schemas.js';
import { closeReasons, type CloseReason } from './slot-policy.js';
import { petStatuses } from '../schemas.js';
import type { ObserveCall } from '../store/instrumented.js';
import { PET_COUNTS_MAX_AGE_MS, type ReplicaState, type Replication, type Store } from '../store/store.js';
import type { WebhookStats } from '../store/webhooks.js';

const HTTP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const STORE_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5];

let processRegistry: Registry | undefined;

// Process metrics describe the process, not an app: one set however many apps a process builds
// (tests build hundreds), each collector installed once.
function readProcessRegistry(): Registry {
  if (!processRegistry) {
    processRegistry = new Registry();
    collectDefaultMetrics({ register: processRegistry });
  }
  return processRegistry;
}

type AnswerLabels = Record<'operation' | 'method' | 'status', string>;

/**
 * Where one route's answers are counted: its operation label, resolved once per route, and the
 * label set of each method and status it answered, made on the first such answer and kept.
 */
export interface AnswerSeries {
  /** The operationId (`getPet`), else the route (`/healthz`), else `unmatched` (operation.ts). */
  readonly operation: string;
  /** Counts and times one answer (petstore_http_requests_total and its duration histogram). */
  observe(method: string, status: number, seconds: number): void;
}

export interface Metrics {
  /** This app's metrics and the process's, in the Prometheus text format. */
  registry: Registry;
  /** The series of the answers to `operation`: one object per operation, asked for once per route. */
  answerSeries(operation: string): AnswerSeries;
  /** petstore_http_requests_in_flight: a plain number, read when scraped. */
  inFlight: { count: number };
  /** petstore_store_duration_seconds, by Store method and outcome. */
  observeStoreCall: ObserveCall;
  /** petstore_deprecated_requests_total: one authenticated call of a deprecated operation. */
  countDeprecatedCall(operation: 'getPet'): void;
  /** petstore_connections_closed_total: one connection the service closed or refused itself, by reason. */
  countClosedConnection(reason: CloseReason): void;
  /** petstore_webhook_attempts_total: one webhook attempt, by result (src/events/relay.ts). */
  countWebhookAttempt(result: string): void;
}

// A scrape reads the three webhook gauges from one query, at most once a second.
const WEBHOOK_STATS_MAX_AGE_MS = 1000;

/**
 * The app's metrics in a registry of its own (not prom-client's global one), so apps built in
 * one process never share or clash. `petstore_pets` is read from `store` at scrape time: running
 * counts (SQLite) or a count cached for 5 s (PostgreSQL), never a scan per scrape. The webhook
 * gauges are read at most once a second, and the oldest event's age taken, by `clock`: the
 * clock the events are stamped with.
 */
export function createMetrics(store: Store, clock: Clock = systemClock): Metrics {
  const registry = new Registry();
  const registers = [registry];
  const labelNames = ['operation', 'method', 'status'] as const;
  const durations = new Histogram({
    name: 'petstore_http_request_duration_seconds',
    help: 'Time from receiving a request to sending its response, by operation, method and status.',
    labelNames,
    buckets: HTTP_BUCKETS,
    registers,
  });
  const answers = new Counter({
    name: 'petstore_http_requests_total',
    help: 'HTTP requests answered, by operation (operationId or route), method and status.',
    labelNames,
    registers,
  });
  // prom-client validates and hashes a label set on every observe and inc, whatever form it is
  // given in (its children too); a series keeps its label sets so an answer builds none.
  const seriesByOperation = new Map<string, AnswerSeries>();
  const answerSeries = (operation: string): AnswerSeries => {
    let series = seriesByOperation.get(operation);
    if (series) return series;
    const byMethod = new Map<string, Map<number, AnswerLabels>>();
    series = {
      operation,
      observe(method, status, seconds) {
        let byStatus = byMethod.get(method);
        if (!byStatus) byMethod.set(method, (byStatus = new Map()));
        let labels = byStatus.get(status);
        if (!labels) byStatus.set(status, (labels = { operation, method, status: String(status) }));
        durations.observe(labels, seconds);
        answers.inc(labels);
      },
    };
    seriesByOperation.set(operation, series);
    return series;
  };
  const inFlight = { count: 0 };
  new Gauge({
    name: 'petstore_http_requests_in_flight',
    help: 'Requests received and not yet answered.',
    registers,
    collect() {
      this.set(inFlight.count);
    },
  });
  const storeDurations = new Histogram({
    name: 'petstore_store_duration_seconds',
    help: 'Time a Store method took, by method and outcome (ok or error).',
    labelNames: ['method', 'outcome'] as const,
    buckets: STORE_BUCKETS,
    registers,
  });
  // The label sets of each Store method, made once: [ok, error].
  type StoreLabels = Record<'method' | 'outcome', string>;
  const storeLabels = new Map<string, [ok: StoreLabels, error: StoreLabels]>();
  const storeLabelsOf = (method: string) => {
    let labels = storeLabels.get(method);
    if (labels) return labels;
    const ok = { method, outcome: 'ok' };
    storeLabels.set(method, (labels = [ok, { ...ok, outcome: 'error' }]));
    return labels;
  };
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
  if (store.replication) registerReplicationMetrics(store.replication, registers);
  // docs/operations.md#deprecated-use-the-clients-to-move-before-the-sunset: with keys list, tells an operator which clients to move
  // before getPet's sunset. The series exists from the start, at 0, so rate() sees the first call.
  const deprecatedCalls = new Counter({
    name: 'petstore_deprecated_requests_total',
    help: 'Calls of a deprecated operation by an accepted API key, by operation (keys list shows which key).',
    labelNames: ['operation'] as const,
    registers,
  });
  const getPetCalls = deprecatedCalls.labels('getPet');
  getPetCalls.inc(0);
  // docs/hardening.md#connections: connections closed for holding a slot without progress, and the rest.
  const closedConnections = new Counter({
    name: 'petstore_connections_closed_total',
    help: `Connections the service closed or refused itself, by reason (docs/hardening.md#connections): ${closeReasons.join(', ')}.`,
    labelNames: ['reason'] as const,
    registers,
  });
  // docs/webhooks.md#seen-from-outside. The series exist from the start, at 0.
  const webhookAttempts = new Counter({
    name: 'petstore_webhook_attempts_total',
    help: 'Webhook attempts this instance made, by result: success, http_error, redirect, timeout, network_error, url_refused, event_expired (docs/webhooks.md).',
    labelNames: ['result'] as const,
    registers,
  });
  for (const result of ['success', 'http_error', 'redirect', 'timeout', 'network_error', 'url_refused']) {
    webhookAttempts.labels(result).inc(0);
  }
  let stats: { at: number; read: Promise<WebhookStats> } | undefined;
  const readStats = () => {
    const now = clock.now();
    if (!stats || now - stats.at > WEBHOOK_STATS_MAX_AGE_MS || now < stats.at) {
      stats = { at: now, read: store.webhooks.stats() };
    }
    return stats.read;
  };
  const webhookGauge = (name: string, help: string, value: (stats: WebhookStats) => number) =>
    new Gauge({
      name,
      help,
      registers,
      // As petstore_pets: the database being down leaves the series out rather than failing the scrape.
      async collect() {
        try {
          this.set(value(await readStats()));
        } catch {
          this.reset();
        }
      },
    });
  webhookGauge(
    'petstore_webhook_events_waiting',
    'Events owed to enabled webhook endpoints and not yet delivered, summed over the endpoints (every instance).',
    (s) => s.waiting,
  );
  webhookGauge(
    'petstore_webhook_oldest_waiting_seconds',
    'Age of the oldest event an enabled webhook endpoint is still owed; 0 when none waits.',
    (s) => (s.oldestWaitingAt ? Math.max(0, (clock.now() - s.oldestWaitingAt.getTime()) / 1000) : 0),
  );
  webhookGauge(
    'petstore_webhook_endpoints_disabled',
    'Webhook endpoints disabled for failing every attempt for PETSTORE_WEBHOOK_GIVE_UP.',
    (s) => s.disabled,
  );
  return {
    registry: Registry.merge([registry, readProcessRegistry()]),
    answerSeries,
    inFlight,
    observeStoreCall(method, failed, seconds) {
      storeDurations.observe(storeLabelsOf(method)[failed ? 1 : 0], seconds);
    },
    // getPet is the one deprecated operation.
    countDeprecatedCall: () => getPetCalls.inc(),
    countClosedConnection: (reason) => closedConnections.inc({ reason }),
    countWebhookAttempt: (result) => webhookAttempts.inc({ result }),
  };
}

// Every state a replica can be in: in use, or left out for one reason (docs/operations.md#read-replicas).
const REPLICA_STATES = Object.keys({
  in_use: true,
  unreachable: true,
  promoted: true,
  other_cluster: true,
  paused: true,
  unmeasured: true,
  lagging: true,
} satisfies Record<ReplicaState['state'], true>);

/**
 * The read replicas' series (docs/operations.md#read-replicas), read from what the background
 * checks last measured when scraped: each replica's lag and state, and the reads sent to the
 * primary and to each replica.
 */
function registerReplicationMetrics(replication: Replication, registers: Registry[]): void {
  new Gauge({
    name: 'petstore_replica_lag_seconds',
    help: 'How far behind the primary each read replica was last measured; absent while not measured.',
    labelNames: ['replica'] as const,
    registers,
    collect() {
      this.reset();
      for (const { name, lagMs } of replication.replicas())
        if (lagMs !== null) this.set({ replica: name }, lagMs / 1000);
    },
  });
  new Gauge({
    name: 'petstore_replica_state',
    help: `Each read replica's state, 1 for the one it is in: ${REPLICA_STATES.join(', ')} (in_use: read from; the others say why it is left out).`,
    labelNames: ['replica', 'state'] as const,
    registers,
    collect() {
      for (const { name, state } of replication.replicas()) {
        for (const each of REPLICA_STATES) this.set({ replica: name, state: each }, each === state ? 1 : 0);
      }
    },
  });
  new Gauge({
    name: 'petstore_primary_answering',
    help: 'Whether the primary database answered its last check in time (1) or not (0), with read replicas.',
    registers,
    collect() {
      this.set(replication.primaryAnswering() ? 1 : 0);
    },
  });
  // Counted by the store as plain numbers (no work per read here); each scrape adds what came since.
  const reported = new Map<string, number>();
  const addSince = (counter: Counter<string>, labels: Record<string, string>, key: string, total: number) => {
    counter.inc(labels, total - (reported.get(key) ?? 0));
    reported.set(key, total);
  };
  new Counter({
    name: 'petstore_primary_reads_total',
    help: 'Reads of the animals and the feed sent to the primary (with read replicas: none in use, or the reading key wrote lately).',
    registers,
    collect() {
      addSince(this, {}, '', replication.primaryReads());
    },
  });
  new Counter({
    name: 'petstore_replica_reads_total',
    help: 'Reads of the animals and the feed sent to each read replica.',
    labelNames: ['replica'] as const,
    registers,
    collect() {
      for (const { name, reads } of replication.replicas()) addSince(this, { replica: name }, name, reads);
    },
  });
}

/**
 * `GET /metrics` in the Prometheus text format, behind an API key with the `metrics:read` scope
 * (docs/operations.md#metrics): Prometheus scrapes it with `authorization: { credentials: <key> }`.
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
