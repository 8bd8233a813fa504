import { randomUUID } from 'node:crypto';
import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import { systemClock, type Clock } from '../clock.js';
import { causeOf } from '../errors.js';
import type { Store } from '../store/store.js';
import type { AttemptOutcome, ClaimedDelivery, FinishResult } from '../store/webhooks.js';
import { endpointAgents } from './agents.js';
import { makeAttempt, type AttemptDeps, type Log, type Made, type RelayConfig } from './attempt.js';
import type { AttemptResult } from './deliver.js';
import { scheduleLooks, type Found, type LookSchedule } from './looks.js';
import { allotSlots } from './slots.js';
import { endpointTurns } from './turns.js';
import { urlOrigin } from './url-policy.js';
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

/**
 * The webhook relay (docs/webhooks.md#the-relay). Woken by each commit that writes events (and
 * by a timer, the fallback, and its own retries and probes coming due: looks.ts), it looks for
 * work: allotSlots (slots.ts) chooses how many deliveries to lease for each endpoint, the store
 * leases them (handing the endpoint the events after its cursor, a bounded batch at a time), and
 * each attempt starts at once; outcomes are written as attempts end, those of one turn together.
 * What it holds in memory is bounded by PETSTORE_WEBHOOK_CONCURRENCY and the endpoints, never by
 * the events waiting, and a process killed mid-attempt loses nothing (the lease expires and the
 * attempt is made again). It runs in the root context: no attempt is part of a request's trace,
 * log or metrics, and no request waits for one.
 */
export function startRelay(options: RelayOptions): Relay {
  const relay = new DeliveryRelay(options);
  context.with(ROOT_CONTEXT, () => void relay.begin());
  return { wake: () => relay.wake(), stop: (graceMs = 5000) => relay.stop(graceMs) };
}

class DeliveryRelay {
  readonly #store: Store;
  readonly #config: RelayConfig;
  readonly #log: Log;
  readonly #clock: Clock;
  readonly #batch: number;
  readonly #looked: NonNullable<RelayOptions['looked']>;
  readonly #owner = randomUUID();
  readonly #turns = endpointTurns();
  readonly #agents: ReturnType<typeof endpointAgents>;
  readonly #stopping = new AbortController();
  readonly #inFlight = new Set<Promise<void>>();
  readonly #attemptDeps: AttemptDeps;
  readonly #looks: LookSchedule;
  readonly #outcomes: ReturnType<typeof writeQueue<AttemptOutcome, FinishResult['outcomes'][number]>>;
  #stopped = false;
  // Set once stop has waited enough: an attempt that ends after records nothing.
  #abandoned = false;
  #failing = false;
  #unlisten: () => Promise<void> = async () => {};

  constructor({
    store,
    config,
    log,
    clock = systemClock,
    countAttempt = () => {},
    pollMs = POLL_MS,
    batch = BATCH,
    random = Math.random,
    looked = () => {},
  }: RelayOptions) {
    this.#store = store;
    this.#config = config;
    this.#log = log;
    this.#clock = clock;
    this.#batch = batch;
    this.#looked = looked;
    this.#agents = endpointAgents({ maxSockets: config.webhookConcurrency, timeoutMs: config.webhookTimeoutMs });
    this.#attemptDeps = {
      config,
      clock,
      random,
      log,
      agents: (delivery) => this.#agents.of(delivery.endpointId, delivery.url),
      signal: this.#stopping.signal,
      countAttempt,
    };
    this.#looks = scheduleLooks({
      look: (read) => this.#look(read),
      markPending: () => this.#turns.markPending(),
      nextDueAt: (now) => this.#turns.nextDueAt(now),
      clock,
      pollMs,
      echoes: !store.idsVisibleInOrder,
    });
    this.#outcomes = writeQueue((items: AttemptOutcome[]) => this.#write(items));
  }

  /** Takes back what a previous run left leased (store.recover), then listens for commits and looks. */
  async begin(): Promise<void> {
    try {
      await this.#store.webhooks.recover();
    } catch (error) {
      this.#log.warn(
        { cause: causeOf(error) },
        'webhook relay could not take back the leases of a previous run; they expire',
      );
    }
    if (this.#stopped) return;
    this.#unlisten = this.#store.webhooks.onEventsWritten(() => this.wake());
    this.#looks.request();
  }

  wake(): void {
    this.#looks.wake();
  }

  async stop(graceMs: number): Promise<void> {
    if (this.#stopped) return;
    this.#stopped = true;
    await this.#unlisten();
    await this.#looks.stop();
    await this.#attemptsEnded(graceMs);
    this.#abandoned = true;
    this.#stopping.abort();
    await this.#outcomes.idle();
    this.#agents.destroy();
  }

  /** Waits for the attempts in flight to end and be recorded, `ms` at most: real time, not the relay's clock. */
  async #attemptsEnded(ms: number): Promise<void> {
    const deadline = performance.now() + ms;
    while (this.#inFlight.size > 0 && performance.now() < deadline) {
      const left = deadline - performance.now();
      await Promise.race([Promise.all(this.#inFlight), new Promise((resolve) => setTimeout(resolve, left).unref())]);
    }
  }

  /** One look, its failure logged once (and its recovery). */
  async #look(read: boolean): Promise<Found> {
    try {
      const leased = await this.#leaseWork(read);
      if (this.#failing) this.#log.info({}, 'webhook relay reaches the database again');
      this.#failing = false;
      return leased > 0 ? 'work' : 'nothing';
    } catch (error) {
      if (!this.#failing) this.#log.warn({ cause: causeOf(error) }, 'webhook relay cannot read its work; trying again');
      this.#failing = true;
      return 'failed';
    }
  }

  /** The endpoints read anew (when `read`), the slots allotted and leased, each attempt started: how many. */
  async #leaseWork(read: boolean): Promise<number> {
    const began = performance.now();
    const now = this.#clock.now();
    if (read) {
      this.#turns.refresh(await this.#store.webhooks.relayEndpoints(), now);
      this.#agents.keep(this.#turns.ids());
    }
    this.#turns.due(now);
    const concurrency = this.#config.webhookConcurrency;
    const wants = allotSlots(this.#turns.list(), { concurrency, now });
    let claimed: ClaimedDelivery[] = [];
    if (wants.length > 0 && !this.#stopped) {
      // The time the leases start (and the secrets are chosen) is the claim's own.
      const at = this.#clock.now();
      const leaseMs = this.#config.webhookLeaseMs;
      claimed = await this.#store.webhooks.claim({ now: at, leaseMs, owner: this.#owner, wants, batch: this.#batch });
      this.#turns.claimed(wants, claimed, at, leaseMs);
      for (const delivery of claimed) this.#start(delivery);
    }
    this.#looked(claimed, began);
    return claimed.length;
  }

  /** An attempt, then its outcome written; its slot is free once that is done (or failed). */
  #start(delivery: ClaimedDelivery): void {
    const running: Promise<void> = context
      .with(ROOT_CONTEXT, () => this.#attemptAndRecord(delivery))
      .catch((error: unknown) => {
        // Not written: the lease expires and the attempt is made again.
        this.#log.warn(
          { endpoint: delivery.endpointId, cause: causeOf(error) },
          'recording a webhook attempt failed; it will be made again',
        );
      })
      .finally(() => {
        this.#turns.released(delivery.endpointId);
        this.#inFlight.delete(running);
        this.#looks.request();
      });
    this.#inFlight.add(running);
  }

  async #attemptAndRecord(delivery: ClaimedDelivery): Promise<void> {
    const made = await makeAttempt(delivery, this.#attemptDeps);
    if (!made || this.#abandoned) return;
    if (made.answer) {
      const concurrency = this.#config.webhookConcurrency;
      this.#turns.answered(delivery.endpointId, made.answer, made.outcome.retryAt, concurrency);
    }
    this.#logWritten(delivery, made, await this.#outcomes.push(made.outcome));
  }

  /** Outcomes of one batch, in one call of the store: the endpoints' new back-off goes to the turns. */
  async #write(items: AttemptOutcome[]): Promise<FinishResult['outcomes']> {
    const written = await this.#store.webhooks.finish({
      owner: this.#owner,
      retryMs: this.#config.webhookRetryMs,
      outcomes: items,
    });
    this.#turns.backoff(written.endpoints);
    return written.outcomes;
  }

  /** The log lines of an attempt once its outcome is written (or was not: docs/webhooks.md#repeats). */
  #logWritten(delivery: ClaimedDelivery, made: Made, written: FinishResult['outcomes'][number]): void {
    const endpoint = delivery.endpointId;
    if (written === 'lost') {
      this.#log.warn(
        { endpoint, event: made.outcome.record.eventId, attempt: delivery.attempt },
        'webhook attempt not recorded: its lease expired and another relay took the delivery over',
      );
      return;
    }
    made.logFailure();
    if (written === 'disabled') {
      this.#log.error(
        { endpoint, origin: urlOrigin(delivery.url), giveUpMs: this.#config.webhookGiveUpMs },
        'webhook endpoint disabled: every attempt failed for PETSTORE_WEBHOOK_GIVE_UP; petstore webhooks enable <id> turns it back on',
      );
    }
  }
}
