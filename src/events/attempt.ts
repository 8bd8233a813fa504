import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { AttemptOutcome, ClaimedDelivery } from '../store/webhooks.js';
import type { Agents } from './agents.js';
import { postEvent, type Attempt, type AttemptResult } from './deliver.js';
import { eventJson } from './event-json.js';
import { formatEventId } from './ids.js';
import { retryDelay } from './retries.js';
import { signatures } from './signature.js';
import { refuseWebhookUrl, urlOrigin } from './url-policy.js';

export type RelayConfig = Pick<
  Config,
  | 'webhookConcurrency'
  | 'webhookTimeoutMs'
  | 'webhookRetryMs'
  | 'webhookGiveUpMs'
  | 'webhookLeaseMs'
  | 'webhookAllowHttp'
>;

export type Log = {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  error(object: object, message: string): void;
};

export interface AttemptDeps {
  config: RelayConfig;
  clock: Clock;
  random: () => number;
  log: Log;
  /** The endpoint's keep-alive agents (agents.ts). */
  agents: (delivery: ClaimedDelivery) => Agents;
  /** Aborted when the relay gives up waiting for the attempts in flight (stop). */
  signal: AbortSignal;
  countAttempt: (result: AttemptResult | 'event_expired') => void;
}

/** An attempt made: its outcome to record, how the receiver answered (pace.ts), and its log line once recorded. */
export interface Made {
  outcome: AttemptOutcome;
  answer: { ok: boolean; timedOut: boolean; durationMs: number } | undefined;
  /** Logs the failure, if it was one: called once the outcome is written. */
  logFailure: () => void;
}

/**
 * One attempt of a leased delivery (docs/webhooks.md#delivery): the URL policy checked again,
 * the event signed and posted, its retry time or give-up worked out, a failure logged and
 * counted. Resolves to what to record, or to undefined when the relay stopped it (nothing to
 * record: the lease is left to expire). Never rejects.
 */
export async function makeAttempt(delivery: ClaimedDelivery, deps: AttemptDeps): Promise<Made | undefined> {
  const { config, clock, random } = deps;
  const { endpointId, position, event } = delivery;
  const eventId = formatEventId(position);
  const at = clock.now();
  const jitter = random();
  const record = { endpointId, eventId, attempt: delivery.attempt, at: new Date(at) };
  if (!event) {
    deps.countAttempt('event_expired');
    const error = 'the event is no longer kept (PETSTORE_EVENT_RETENTION)';
    return {
      outcome: {
        record: { ...record, status: null, error, durationMs: 0 },
        position,
        ok: false,
        retryAt: undefined,
        disableUnlessSuccessSince: -1,
        jitter,
      },
      answer: undefined,
      logFailure: () =>
        deps.log.warn(
          { endpoint: endpointId, event: eventId, attempt: delivery.attempt },
          'webhook delivery dropped: the event is no longer kept',
        ),
    };
  }
  const attempt = await post(delivery, eventId, at, deps);
  if (attempt.aborted) return undefined;
  deps.countAttempt(attempt.result);
  const done = clock.now();
  const deadline = event.createdAt.getTime() + config.webhookGiveUpMs;
  let retryAt: number | undefined;
  if (!attempt.ok) {
    retryAt = done + retryDelay(delivery.attempt, config.webhookRetryMs, () => jitter);
    // The last attempt is made when the give-up period ends, so an endpoint down for all of it
    // is tried at its end (and then disabled), not a retry delay before.
    if (retryAt > deadline) retryAt = done >= deadline ? undefined : deadline;
  }
  return {
    outcome: {
      record: { ...record, status: attempt.status, error: attempt.error, durationMs: attempt.durationMs },
      position,
      ok: attempt.ok,
      retryAt,
      disableUnlessSuccessSince: retryAt === undefined ? event.createdAt.getTime() : done - config.webhookGiveUpMs,
      jitter,
    },
    // A URL the policy refused says nothing of the receiver.
    answer:
      attempt.result === 'url_refused'
        ? undefined
        : { ok: attempt.ok, timedOut: attempt.result === 'timeout', durationMs: attempt.durationMs },
    logFailure: () => {
      if (!attempt.ok) logFailure(delivery, eventId, attempt, retryAt, deps.log);
    },
  };
}

/** The POST itself, unless the URL policy refuses the endpoint's URL now. */
async function post(delivery: ClaimedDelivery, eventId: string, at: number, deps: AttemptDeps): Promise<Attempt> {
  const refused = refuseWebhookUrl(delivery.url, deps.config.webhookAllowHttp);
  if (refused) {
    return {
      result: 'url_refused',
      ok: false,
      status: null,
      error: `URL refused: ${refused}`,
      durationMs: 0,
      aborted: false,
    };
  }
  const body = eventJson(delivery.event!);
  const timestamp = Math.floor(at / 1000);
  return postEvent({
    url: delivery.url,
    body,
    headers: {
      'webhook-id': eventId,
      'webhook-timestamp': String(timestamp),
      'webhook-signature': signatures(delivery.secrets, eventId, timestamp, body),
    },
    timeoutMs: deps.config.webhookTimeoutMs,
    agents: deps.agents(delivery),
    signal: deps.signal,
    spanAttributes: { 'petstore.webhook.endpoint': delivery.endpointId, 'petstore.event.id': eventId },
  });
}

function logFailure(
  delivery: ClaimedDelivery,
  eventId: string,
  attempt: Attempt,
  retryAt: number | undefined,
  log: Log,
) {
  const next = retryAt === undefined ? { gaveUp: true } : { retryAt: new Date(retryAt).toISOString() };
  log.warn(
    {
      endpoint: delivery.endpointId,
      event: eventId,
      attempt: delivery.attempt,
      origin: urlOrigin(delivery.url),
      result: attempt.result,
      status: attempt.status,
      error: attempt.error,
      durationMs: attempt.durationMs,
      ...next,
    },
    retryAt === undefined ? 'webhook attempt failed; the event is given up' : 'webhook attempt failed; retrying',
  );
}
