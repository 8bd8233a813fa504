import { randomUUID } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { systemClock, type Clock } from '../clock.js';
import type { Config } from '../config.js';
import { causeOf } from '../errors.js';
import type { Store } from '../store/store.js';
import type { AttemptOutcome, ClaimedDelivery } from '../store/webhooks.js';
import { postEvent, type Attempt, type AttemptResult } from './deliver.js';
import { eventJson } from './event-json.js';
import { formatEventId } from './ids.js';
import { retryDelay } from './retries.js';
import { signatures } from './signature.js';
import { refuseWebhookUrl, urlOrigin } from './url-policy.js';

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

const POLL_MS = 500;
const BATCH = 100;
const WINDOW = 1000;
// Looks are at least this far apart, however fast attempts end (a receiver refusing every
// connection): the relay's database work stays a small share of the process's time.
const LOOK_GAP_MS = 10;

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms).unref());

/**
 * The webhook relay (docs/webhooks.md#the-relay): it hands each enabled endpoint the events written
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
  // Attempts until their outcome is written (stop waits for them), and those still sending: the
  // concurrency bounds the latter; an outcome waits at most one look to be written.
  const inFlight = new Set<Promise<void>>();
  let sending = 0;
  // The earliest retry this relay scheduled: the idle wait ends then rather than at the next poll.
  let nextRetry = Infinity;
  const outcomes: { outcome: AttemptOutcome; written: (disabled: boolean) => void }[] = [];
  let stopped = false;
  let nudge: (() => void) | undefined;
  let failing = false;

  const wake = () => {
    nudge?.();
    nudge = undefined;
  };
  const woken = () => new Promise<void>((resolve) => (nudge = resolve));

  /** Resolves once the outcome is written (flush), to whether it disabled the endpoint. */
  const record = (outcome: AttemptOutcome) =>
    new Promise<boolean>((written) => {
      outcomes.push({ outcome, written });
      wake();
    });

  // The outcomes of the attempts ended since the last look, in one transaction. One that cannot
  // be written is lost with its lease, which expires: the attempt is then made again.
  const flush = async () => {
    const taken = outcomes.splice(0);
    if (taken.length === 0) return;
    let disabled: boolean[] = [];
    try {
      disabled = await store.webhooks.finish(taken.map(({ outcome }) => outcome));
    } catch (error) {
      log.warn(
        { cause: causeOf(error), attempts: taken.length },
        'recording webhook attempts failed; they will be made again',
      );
    }
    for (const [i, { written }] of taken.entries()) written(disabled[i] ?? false);
  };

  const attempt = async (delivery: ClaimedDelivery, sent: () => void) => {
    const { endpointId, position, event, url } = delivery;
    const eventId = formatEventId(position);
    const endpoint = { endpoint: endpointId, event: eventId, attempt: delivery.attempt };
    const at = clock.now();
    if (!event) {
      sent();
      countAttempt('event_expired');
      await record({
        record: {
          endpointId,
          eventId,
          attempt: delivery.attempt,
          at: new Date(at),
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
    const refused = refuseWebhookUrl(url, config.webhookAllowHttp);
    let outcome: Attempt;
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
    sent();
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
      if (retryAt !== undefined) nextRetry = Math.min(nextRetry, retryAt);
    }
    const disabled = await record({
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
    sending += 1;
    let done = false;
    const sent = () => {
      if (done) return;
      done = true;
      sending -= 1;
      wake();
    };
    const running: Promise<void> = attempt(delivery, sent)
      .catch((error: unknown) => {
        // Not given back: the lease expires and the attempt is made again.
        log.warn(
          { endpoint: delivery.endpointId, err: error },
          'a webhook attempt failed to end; it will be made again',
        );
      })
      .finally(() => {
        sent();
        inFlight.delete(running);
        wake();
      });
    inFlight.add(running);
  };

  // One look: write the outcomes ended since the last, hand out new events, then lease as many
  // due deliveries as there are free slots. True when there may be more to do at once. The
  // relay's database work is one call at a time: on PostgreSQL, one connection of the pool.
  const look = async (): Promise<boolean> => {
    await flush();
    const handed = await store.webhooks.handOut(clock.now(), batch, window);
    const free = config.webhookConcurrency - sending;
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
    try {
      await store.webhooks.recover();
    } catch (error) {
      log.warn(
        { cause: causeOf(error) },
        'webhook relay could not take back the leases of a previous run; they expire',
      );
    }
    while (!stopped) {
      const began = performance.now();
      let more = false;
      try {
        more = await look();
        if (failing) log.info({}, 'webhook relay reaches the database again');
        failing = false;
      } catch (error) {
        if (!failing) log.warn({ cause: causeOf(error) }, 'webhook relay cannot read its work; trying again');
        failing = true;
      }
      if (stopped) break;
      if (!more) {
        const untilRetry = nextRetry - clock.now();
        // Due already: the look just made has leased it, or another relay has.
        if (untilRetry <= 0) nextRetry = Infinity;
        await Promise.race([sleep(untilRetry > 0 ? Math.min(pollMs, untilRetry + 1) : pollMs), woken()]);
      }
      const gap = LOOK_GAP_MS - (performance.now() - began);
      if (gap > 0 && !stopped) await sleep(gap);
    }
  };
  const running = context.with(ROOT_CONTEXT, loop);

  // Writes outcomes as attempts end, until none is in flight or `ms` have passed: real time (a
  // grace for the process to stop), not the relay's clock.
  const settle = async (ms: number) => {
    const deadline = performance.now() + ms;
    while (inFlight.size > 0 && performance.now() < deadline) {
      await flush();
      await Promise.race([sleep(Math.min(20, Math.max(1, deadline - performance.now()))), woken()]);
    }
    await flush();
  };

  return {
    wake,
    async stop(graceMs = 5000) {
      if (stopped) return;
      stopped = true;
      wake();
      await running;
      await settle(graceMs);
      // What is still in flight is stopped and given back (release), not recorded.
      stopping.abort();
      await settle(1000);
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
