import { randomUUID } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { systemClock, type Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Store } from '../store/store.js';
import type { ClaimedDelivery } from '../store/webhooks.js';
import { postEvent, type Attempt, type AttemptResult } from './deliver.js';
import { eventJson } from './event-json.js';
import { formatEventId } from './ids.js';
import { signatures } from './signature.js';
import { refuseWebhookUrl, urlOrigin } from './url-policy.js';

/** The longest wait between two retries, whatever the attempt number. */
export const MAX_RETRY_DELAY_MS = 6 * 3_600_000;

/**
 * The wait after failed attempt `attempt` (1 for the first): PETSTORE_WEBHOOK_RETRY_MS doubled
 * with each attempt, up to MAX_RETRY_DELAY_MS, and up to half as much again at random, so
 * receivers that failed together are not retried together (docs/webhooks.md#retries).
 *
 * @example retryDelay(1, 5000, () => 0) // 5000
 * @example retryDelay(3, 5000, () => 0) // 20000
 */
export function retryDelay(attempt: number, retryMs: number, random: () => number = Math.random): number {
  const base = Math.min(retryMs * 2 ** Math.min(attempt - 1, 40), MAX_RETRY_DELAY_MS);
  return Math.round(base + random() * (base / 2));
}

type Log = {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
};

export type RelayConfig = Pick<
  Config,
  | 'webhookConcurrency'
  | 'webhookTimeoutMs'
  | 'webhookRetryMs'
  | 'webhookGiveUpMs'
  | 'webhookLeaseMs'
  | 'webhookAllowHttp'
>;

export interface RelayOptions {
  store: Store;
  config: RelayConfig;
  log: Log;
  clock?: Clock;
  /** Counts one attempt by its result (/metrics: petstore_webhook_attempts_total). */
  countAttempt?: (result: AttemptResult | 'event_expired') => void;
  /** Pause between looks for new events and due retries when there is nothing to do. */
  pollMs?: number;
  /** Events handed out per endpoint per look. */
  batch?: number;
  /** An endpoint with this many deliveries waiting is handed no more until some are done. */
  window?: number;
  random?: () => number;
}

export interface Relay {
  /** Looks for work now instead of at the next poll. */
  wake(): void;
  /**
   * Starts no new attempt, waits up to `graceMs` for those in flight, then stops the rest and
   * gives their deliveries back (due at once, for the next instance or start). Never rejects.
   */
  stop(graceMs?: number): Promise<void>;
}

const POLL_MS = 1000;
const BATCH = 100;
const WINDOW = 1000;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/**
 * The webhook relay (docs/webhooks.md#relay): it hands each enabled endpoint the events written
 * since its cursor, a bounded batch at a time, leases due deliveries (at most
 * PETSTORE_WEBHOOK_CONCURRENCY in flight) and makes each attempt, recording its outcome in the
 * store: so what it holds in memory is bounded by the concurrency and the batch, never by the
 * events waiting, and a process killed mid-attempt loses nothing (the lease expires and the
 * attempt is made again). It runs in the root context: no attempt is part of a request's trace,
 * log or metrics, and no request waits for one.
 */
export function startRelay({
  store,
  config,
  log,
  clock = systemClock,
  countAttempt = () => {},
  pollMs = POLL_MS,
  batch = BATCH,
  window = WINDOW,
  random = Math.random,
}: RelayOptions): Relay {
  const owner = randomUUID();
  const agentOptions = { keepAlive: true, maxSockets: config.webhookConcurrency, timeout: config.webhookTimeoutMs };
  const agents = { http: new http.Agent(agentOptions), https: new https.Agent(agentOptions) };
  const stopping = new AbortController();
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  let nudge: (() => void) | undefined;
  let failing = false;

  const wake = () => {
    nudge?.();
    nudge = undefined;
  };

  const attempt = async (delivery: ClaimedDelivery) => {
    const { endpointId, position, event, url } = delivery;
    const eventId = formatEventId(position);
    const endpoint = { endpoint: endpointId, event: eventId, attempt: delivery.attempt };
    let outcome: Attempt;
    if (!event) {
      countAttempt('event_expired');
      const record = { endpointId, eventId, attempt: delivery.attempt, at: new Date(clock.now()) };
      await store.webhooks.finish({
        record: {
          ...record,
          status: null,
          error: 'the event is no longer kept (PETSTORE_EVENT_RETENTION)',
          durationMs: 0,
        },
        position,
        ok: false,
        retryAt: undefined,
        disableUnlessSuccessSince: -1,
      });
      log.warn(endpoint, 'webhook delivery dropped: the event is no longer kept');
      return;
    }
    const at = clock.now();
    const refused = refuseWebhookUrl(url, config.webhookAllowHttp);
    if (refused) {
      outcome = {
        result: 'url_refused',
        ok: false,
        status: null,
        error: `URL refused: ${refused}`,
        durationMs: 0,
        aborted: false,
      };
    } else {
      const body = eventJson(event);
      const timestamp = Math.floor(at / 1000);
      outcome = await postEvent({
        url,
        body,
        headers: {
          'webhook-id': eventId,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': signatures(delivery.secrets, eventId, timestamp, body),
        },
        timeoutMs: config.webhookTimeoutMs,
        agents,
        signal: stopping.signal,
        spanAttributes: { 'petstore.webhook.endpoint': endpointId, 'petstore.event.id': eventId },
      });
    }
    if (outcome.aborted) {
      await store.webhooks.release(endpointId, position, owner);
      return;
    }
    countAttempt(outcome.result);
    const done = clock.now();
    const deadline = event.createdAt.getTime() + config.webhookGiveUpMs;
    let retryAt: number | undefined;
    if (!outcome.ok) {
      retryAt = done + retryDelay(delivery.attempt, config.webhookRetryMs, random);
      // The last attempt is made when the give-up period ends, so an endpoint down for all of it
      // is tried at its end (and then disabled), not a retry delay before.
      if (retryAt > deadline) retryAt = done >= deadline ? undefined : deadline;
    }
    const { disabled } = await store.webhooks.finish({
      record: {
        endpointId,
        eventId,
        attempt: delivery.attempt,
        at: new Date(at),
        status: outcome.status,
        error: outcome.error,
        durationMs: outcome.durationMs,
      },
      position,
      ok: outcome.ok,
      retryAt,
      disableUnlessSuccessSince: retryAt === undefined ? event.createdAt.getTime() : done - config.webhookGiveUpMs,
    });
    if (!outcome.ok) {
      const next = retryAt === undefined ? { gaveUp: true } : { retryAt: new Date(retryAt).toISOString() };
      log.warn(
        {
          ...endpoint,
          origin: urlOrigin(url),
          result: outcome.result,
          status: outcome.status,
          error: outcome.error,
          durationMs: outcome.durationMs,
          ...next,
        },
        retryAt === undefined ? 'webhook attempt failed; the event is given up' : 'webhook attempt failed; retrying',
      );
    }
    if (disabled) {
      log.error(
        { endpoint: endpointId, origin: urlOrigin(url), giveUpMs: config.webhookGiveUpMs },
        'webhook endpoint disabled: every attempt failed for PETSTORE_WEBHOOK_GIVE_UP; petstore webhooks enable <id> turns it back on',
      );
    }
  };

  const start = (delivery: ClaimedDelivery) => {
    const running: Promise<void> = attempt(delivery)
      .catch((error: unknown) => {
        // The outcome could not be recorded: the lease expires and the attempt is made again.
        log.warn(
          { endpoint: delivery.endpointId, err: error },
          'recording a webhook attempt failed; it will be retried',
        );
      })
      .finally(() => {
        inFlight.delete(running);
        wake();
      });
    inFlight.add(running);
  };

  // One look: hand out new events, then lease as many due deliveries as there are free slots.
  // True when there may be more to do at once.
  const look = async (): Promise<boolean> => {
    const handed = await store.webhooks.handOut(clock.now(), batch, window);
    const free = config.webhookConcurrency - inFlight.size;
    if (free <= 0 || stopped) return false;
    // The time the leases start (and the secrets are chosen) is the claim's own.
    const claimed = await store.webhooks.claim({
      now: clock.now(),
      limit: free,
      leaseMs: config.webhookLeaseMs,
      owner,
    });
    for (const delivery of claimed) start(delivery);
    return claimed.length === free || handed > 0;
  };

  const loop = async () => {
    while (!stopped) {
      let more = false;
      try {
        more = await look();
        if (failing) log.info({}, 'webhook relay reaches the database again');
        failing = false;
      } catch (error) {
        if (!failing) log.warn({ err: error }, 'webhook relay cannot read its work; trying again');
        failing = true;
      }
      if (stopped) break;
      if (more) {
        await new Promise((resolve) => setImmediate(resolve));
        continue;
      }
      await Promise.race([sleep(pollMs), new Promise<void>((resolve) => (nudge = resolve))]);
    }
  };
  const running = context.with(ROOT_CONTEXT, loop);

  return {
    wake,
    async stop(graceMs = 5000) {
      if (stopped) return;
      stopped = true;
      wake();
      await running;
      const settled = Promise.all(inFlight);
      await Promise.race([settled, sleep(graceMs)]);
      stopping.abort();
      await Promise.race([settled, sleep(1000)]);
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
