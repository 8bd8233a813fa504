import { randomUUID } from 'node:crypto';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { systemClock, type Clock } from '../clock.js';
import { causeOf } from '../errors.js';
import type { Store } from '../store/store.js';
import type { AttemptOutcome, ClaimedDelivery, FinishResult } from '../store/webhooks.js';
import { endpointAgents } from './agents.js';
import { makeAttempt, type Log, type RelayConfig } from './attempt.js';
import type { AttemptResult } from './deliver.js';
import { urlOrigin } from './url-policy.js';
import { allotSlots } from './slots.js';
import { endpointTurns } from './turns.js';
import { writeQueue } from './write-queue.js';

export type { Log, RelayConfig };

export interface RelayOptions {
  store: Store;
  config: RelayConfig;
  log: Log;
  clock?: Clock;
  /** Counts one attempt by its result (/metrics: petstore_webhook_attempts_total). */
  countAttempt?: (result: AttemptResult | 'event_expired') => void;
  /** The fallback: how often the relay looks for work when no commit or retry has woken it. */
  pollMs?: number;
  /** Events handed out to an endpoint at a time (WebhookStore.claim). */
  batch?: number;
  random?: () => number;
  /**
   * Hears of each whole look, with the deliveries it leased and when it began
   * (`performance.now()`): tests wait for one (test/webhooks.ts).
   */
  looked?: (claimed: ClaimedDelivery[], began: number) => void;
}

export interface Relay {
  /** Looks for work now: every endpoint may have deliveries due. */
  wake(): void;
  /**
   * Starts no new attempt and waits up to `graceMs` for those in flight, their outcomes written
   * as they end; any still running then is stopped, nothing of it written: its lease expires,
   * and the attempt is made again (docs/webhooks.md#repeats). Never rejects.
   */
  stop(graceMs?: number): Promise<void>;
}

const POLL_MS = 500;
const BATCH = 100;
// How often the relay reads the endpoints anew when commits keep waking it; every poll besides.
const REFRESH_MS = 100;
const ECHO_MS = 10;

/**
 * The webhook relay (docs/webhooks.md#the-relay). Woken by each commit that writes events (and
 * by a timer, the fallback, and its own retries and probes coming due), it looks for work:
 * allotSlots (slots.ts) chooses how many deliveries to lease for each endpoint, the store leases
 * them (handing the endpoint the events after its cursor, a bounded batch at a time), and each
 * attempt starts at once; outcomes are written as attempts end, those of one turn together. What
 * it holds in memory is bounded by PETSTORE_WEBHOOK_CONCURRENCY and the endpoints, never by the
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
  random = Math.random,
  looked = () => {},
}: RelayOptions): Relay {
  const owner = randomUUID();
  const concurrency = config.webhookConcurrency;
  const turns = endpointTurns();
  const agents = endpointAgents({ maxSockets: concurrency, timeoutMs: config.webhookTimeoutMs });
  const stopping = new AbortController();
  const inFlight = new Set<Promise<void>>();
  let stopped = false;
  // Set once stop has waited enough: an attempt that ends after records nothing.
  let abandoned = false;
  let looking: Promise<void> | undefined;
  let lookAgain = false;
  let refreshedAt = -Infinity;
  // A wake came while the endpoints were read lately: they are read again REFRESH_MS after,
  // since the commit may be an endpoint's first event (one added since).
  let refreshOwed = false;
  // PostgreSQL: an event committed may be listed only a moment later, once the transactions
  // older than its own have ended (docs/events.md#ordering). A wake is followed by looks
  // ECHO_MS, then twice, four times as long after, up to the poll, until one finds work.
  const echoes = !store.idsVisibleInOrder;
  let echoMs = 0;
  let failing = false;
  let timer: NodeJS.Timeout | undefined;

  const outcomes = writeQueue(async (items: AttemptOutcome[]) => {
    const written = await store.webhooks.finish({ owner, retryMs: config.webhookRetryMs, outcomes: items });
    turns.backoff(written.endpoints);
    return written.outcomes;
  });

  // One look: the endpoints read anew when due, then the slots allotted and leased. True when
  // it leased anything: the next look may find more.
  const look = async (): Promise<boolean> => {
    const began = performance.now();
    const now = clock.now();
    if (performance.now() - refreshedAt >= REFRESH_MS) {
      refreshOwed = false;
      turns.refresh(await store.webhooks.relayEndpoints(), now);
      agents.keep(turns.ids());
      refreshedAt = performance.now();
    }
    turns.due(now);
    const wants = allotSlots(turns.list(), { concurrency, now });
    let claimed: ClaimedDelivery[] = [];
    if (wants.length > 0 && !stopped) {
      // The time the leases start (and the secrets are chosen) is the claim's own.
      const at = clock.now();
      claimed = await store.webhooks.claim({ now: at, leaseMs: config.webhookLeaseMs, owner, wants, batch });
      turns.claimed(wants, claimed, at, config.webhookLeaseMs);
      for (const delivery of claimed) start(delivery);
    }
    looked(claimed, began);
    return claimed.length > 0;
  };

  const runLook = async () => {
    let more = false;
    try {
      more = await look();
      if (failing) log.info({}, 'webhook relay reaches the database again');
      failing = false;
    } catch (error) {
      if (!failing) log.warn({ cause: causeOf(error) }, 'webhook relay cannot read its work; trying again');
      failing = true;
    }
    looking = undefined;
    if (more) echoMs = 0;
    if ((more || lookAgain) && !failing) requestLook();
    else arm();
  };

  // Looks one at a time: one asked for while another runs follows it.
  const requestLook = () => {
    if (stopped) return;
    if (looking) return void (lookAgain = true);
    lookAgain = false;
    clearTimeout(timer);
    looking = new Promise<void>((resolve) => setImmediate(() => context.with(ROOT_CONTEXT, runLook).then(resolve)));
  };

  // The next look without a wake: when a retry or probe comes due, at the latest after pollMs
  // (when every endpoint is read anew and may have work: another instance's release, a lease
  // that expired).
  const arm = () => {
    if (stopped) return;
    clearTimeout(timer);
    const untilDue = turns.nextDueAt(clock.now()) - clock.now();
    const untilRefresh = refreshOwed ? REFRESH_MS - (performance.now() - refreshedAt) : Infinity;
    const untilEcho = echoMs > 0 ? echoMs : Infinity;
    const poll = !(Math.min(untilDue, untilRefresh, untilEcho) < pollMs);
    timer = setTimeout(
      () => {
        if (poll) {
          refreshedAt = -Infinity;
          turns.markPending();
        }
        if (echoMs > 0) {
          turns.markPending();
          echoMs *= 2;
        }
        requestLook();
      },
      poll ? pollMs : Math.max(1, Math.min(untilDue + 1, untilRefresh, untilEcho)),
    );
    timer.unref();
  };

  const attemptDeps = {
    config,
    clock,
    random,
    log,
    agents: (delivery: ClaimedDelivery) => agents.of(delivery.endpointId, delivery.url),
    signal: stopping.signal,
    countAttempt,
  };

  // An attempt, then its outcome written; its slot is free once that is done (or failed).
  const start = (delivery: ClaimedDelivery) => {
    const running: Promise<void> = context
      .with(ROOT_CONTEXT, () => attemptAndRecord(delivery))
      .catch((error: unknown) => {
        // Not written: the lease expires and the attempt is made again.
        log.warn(
          { endpoint: delivery.endpointId, cause: causeOf(error) },
          'recording a webhook attempt failed; it will be made again',
        );
      })
      .finally(() => {
        turns.released(delivery.endpointId);
        inFlight.delete(running);
        requestLook();
      });
    inFlight.add(running);
  };

  const attemptAndRecord = async (delivery: ClaimedDelivery) => {
    const made = await makeAttempt(delivery, attemptDeps);
    if (!made || abandoned) return;
    if (made.answer) turns.answered(delivery.endpointId, made.answer, made.outcome.retryAt, concurrency);
    const written: FinishResult['outcomes'][number] = await outcomes.push(made.outcome);
    if (written !== 'lost') made.logFailure();
    if (written === 'lost') {
      log.warn(
        { endpoint: delivery.endpointId, event: made.outcome.record.eventId, attempt: delivery.attempt },
        'webhook attempt not recorded: its lease expired and another relay took the delivery over',
      );
    }
    if (written === 'disabled') {
      log.error(
        { endpoint: delivery.endpointId, origin: urlOrigin(delivery.url), giveUpMs: config.webhookGiveUpMs },
        'webhook endpoint disabled: every attempt failed for PETSTORE_WEBHOOK_GIVE_UP; petstore webhooks enable <id> turns it back on',
      );
    }
  };

  const wake = () => {
    refreshOwed = true;
    if (echoes) echoMs = ECHO_MS;
    turns.markPending();
    requestLook();
  };
  let unlisten: () => Promise<void> = async () => {};
  context.with(ROOT_CONTEXT, () => {
    store.webhooks
      .recover()
      .catch((error: unknown) =>
        log.warn(
          { cause: causeOf(error) },
          'webhook relay could not take back the leases of a previous run; they expire',
        ),
      )
      .finally(() => {
        if (stopped) return;
        unlisten = store.webhooks.onEventsWritten(wake);
        requestLook();
      });
  });

  return {
    wake,
    async stop(graceMs = 5000) {
      if (stopped) return;
      stopped = true;
      clearTimeout(timer);
      await unlisten();
      await looking;
      // Real time (a grace for the process to stop), not the relay's clock.
      const deadline = performance.now() + graceMs;
      while (inFlight.size > 0 && performance.now() < deadline) {
        const left = deadline - performance.now();
        await Promise.race([Promise.all(inFlight), new Promise((resolve) => setTimeout(resolve, left).unref())]);
      }
      abandoned = true;
      stopping.abort();
      await outcomes.idle();
      agents.destroy();
    },
  };
}
