import { endpointAfter } from '../events/slots.js';
import type { EventPosition, EventRecord } from './event-records.js';

/** A webhook endpoint as `webhooks list` shows it: never its secret. */
export interface WebhookEndpointRecord {
  id: number;
  url: string;
  description: string;
  createdAt: Date;
  /** Set when it failed every attempt for the whole give-up period; null while enabled. */
  disabledAt: Date | null;
  lastSuccessAt: Date | null;
  lastFailureAt: Date | null;
  /** Until then deliveries carry a signature with the secret a roll replaced too; null: none. */
  previousSecretUntil: Date | null;
  /** Events it is owed and has not received: retries waiting plus events not yet handed out. */
  waiting: number;
}

export interface NewWebhookEndpoint {
  url: string;
  description: string;
  /** `whsec_…`, stored as issued: the relay signs with it. */
  secret: string;
  /** Unix ms. */
  createdAt: number;
}

/** One attempt to deliver one event to one endpoint, as `webhooks deliveries` lists it. */
export interface WebhookAttemptRecord {
  endpointId: number;
  eventId: string;
  /** 1 for the first attempt. */
  attempt: number;
  at: Date;
  /** The receiver's HTTP status; null when none came (refused, timed out, URL refused). */
  status: number | null;
  /** What went wrong, in words; null for a success. */
  error: string | null;
  durationMs: number;
}

/** A delivery a relay has leased: one attempt to make now. */
export interface ClaimedDelivery {
  endpointId: number;
  url: string;
  /** The secrets to sign with: the current one, then the one a roll replaced while its grace lasts. */
  secrets: string[];
  position: EventPosition;
  /** Undefined when retention deleted the event meanwhile: nothing left to send. */
  event: EventRecord | undefined;
  /** This attempt's number, 1 for the first. */
  attempt: number;
}

/** Deliveries to lease for one endpoint (src/events/slots.ts, allotSlots). */
export interface DeliveryWant {
  endpointId: number;
  count: number;
  /**
   * A probe of an endpoint that is down: its oldest delivery waiting (the feed's order), whatever
   * that one's own retry time, and only while the endpoint's probe_at has passed; the claim moves
   * probe_at to the lease's end, so one instance probes at a time.
   */
  probe: boolean;
}

export interface ClaimQuery {
  /** Unix ms. */
  now: number;
  /** The leases last until now + leaseMs; past it another relay may take a delivery over. */
  leaseMs: number;
  /** Who holds the leases: the relay's own random id. */
  owner: string;
  wants: readonly DeliveryWant[];
  /**
   * Events copied at a time into the deliveries of an endpoint that has fewer due than wanted
   * and events after its cursor.
   */
  batch: number;
}

export interface AttemptOutcome {
  record: WebhookAttemptRecord;
  position: EventPosition;
  ok: boolean;
  /** When to try again (Unix ms); undefined: give up on this event. Ignored on success. */
  retryAt: number | undefined;
  /**
   * A failure disables the endpoint when it has had no success since this instant (Unix ms) and
   * was already failing then, or when this attempt gave up (every attempt since the event was
   * created failed). The relay passes the attempt's time minus PETSTORE_WEBHOOK_GIVE_UP, or the
   * event's creation when it gives up.
   */
  disableUnlessSuccessSince: number;
  /** The attempt's random draw, 0 to 1: the jitter of its retry, and of the endpoint's probe (slots.ts, endpointAfter). */
  jitter: number;
}

export interface FinishQuery {
  /** The relay that made the attempts: an outcome is written only while its lease is still this owner's. */
  owner: string;
  /** PETSTORE_WEBHOOK_RETRY_MS: the endpoint's back-off starts from it. */
  retryMs: number;
  /** In the order the attempts ended. */
  outcomes: readonly AttemptOutcome[];
}

export interface FinishResult {
  /**
   * Per outcome: recorded; recorded, and it disabled its endpoint; or lost: the lease was no
   * longer this owner's (it expired and another relay took the delivery over), nothing written.
   */
  outcomes: ('recorded' | 'disabled' | 'lost')[];
  /** The back-off of each endpoint these outcomes were for, once written. */
  endpoints: RelayEndpoint[];
}

/** An enabled endpoint as a relay sees it when it chooses what to attempt next (src/events/slots.ts). */
export interface RelayEndpoint {
  id: number;
  /** Failed attempts in a row, with no success between them. */
  failures: number;
  /** Down: not probed before then (Unix ms); null when not down. */
  probeAt: number | null;
  /** Whether an attempt to it ever succeeded. */
  succeeded: boolean;
}

export interface WebhookStats {
  /** Events owed to enabled endpoints, summed over the endpoints. */
  waiting: number;
  /** When the oldest of them was created; null when none waits. */
  oldestWaitingAt: Date | null;
  /** Endpoints disabled for failing every attempt for the give-up period. */
  disabled: number;
}

/** Webhook endpoints and the state of their deliveries, kept by both stores (docs/webhooks.md). */
export interface WebhookStore extends WebhookTools {
  /** Adds an endpoint that receives every event created from now on. */
  addEndpoint(endpoint: NewWebhookEndpoint): Promise<WebhookEndpointRecord>;
  listEndpoints(): Promise<WebhookEndpointRecord[]>;
  /** Removes it with what it is owed; false when no endpoint has this id. */
  removeEndpoint(id: number): Promise<boolean>;
  /**
   * Enables a disabled endpoint: it receives the events created from now on, and its retries
   * still waiting. 'enabled' when it was disabled, 'already' when it was not.
   */
  enableEndpoint(id: number, now: number): Promise<'enabled' | 'already' | 'unknown'>;
  /** Replaces the secret; the old one signs too until `previousUntil` (Unix ms). False: no such endpoint. */
  rollSecret(id: number, secret: string, previousUntil: number): Promise<boolean>;
  /**
   * The endpoint's newest attempts, newest first; undefined when no endpoint has this id. Every
   * attempt of the events still waiting for it is kept, and at least its last ATTEMPTS_KEPT.
   */
  listAttempts(id: number, limit: number): Promise<WebhookAttemptRecord[] | undefined>;
  /** The enabled endpoints, with their back-off. */
  relayEndpoints(): Promise<RelayEndpoint[]>;
  /**
   * Leases, per endpoint wanted, up to `count` deliveries due (a probe: its oldest waiting),
   * oldest due first, then in the feed's order, counting an attempt for each; an endpoint with
   * fewer due than wanted is first handed the events after its cursor, `batch` at a time. Another
   * relay's lease is taken over only once it has expired.
   */
  claim(query: ClaimQuery): Promise<ClaimedDelivery[]>;
  /**
   * Records attempts and their consequences, all in one transaction, each only while its lease
   * is still `owner`'s: each delivery removed (success, give-up) or due again at `retryAt`, the
   * endpoint's last success or failure and its back-off (src/events/slots.ts, endpointAfter; a
   * success after it was down makes every delivery waiting for it due at once), and the
   * endpoint disabled when it has failed every attempt for the give-up period (see
   * disableUnlessSuccessSince). Attempts beyond what is kept are deleted.
   */
  finish(query: FinishQuery): Promise<FinishResult>;
  /**
   * Called as a relay starts. SQLite, which one process serves (`petstore serve` refuses a file
   * another one serves): ends every lease, since none can belong to a live relay, so a restart
   * after kill -9 or a stop resends at once. PostgreSQL: nothing (other instances hold live
   * leases; an abandoned one expires).
   */
  recover(): Promise<void>;
  /**
   * Calls `listener` after each commit that wrote events: on SQLite this process's; on
   * PostgreSQL any instance's, heard on a connection of its own (LISTEN), called again each
   * time that connection is made anew, since a commit may have gone unheard meanwhile. Returns
   * the function that stops it.
   */
  onEventsWritten(listener: () => void): () => Promise<void>;
  stats(): Promise<WebhookStats>;
}

// The rows both stores read, and what they make of them.

type Int = bigint | number | null;

/** A `webhook_endpoints` row with its waiting count, as both stores read it. */
export interface EndpointRow {
  id: Int;
  url: string;
  description: string;
  created_at: Int;
  disabled_at: Int;
  last_success_at: Int;
  last_failure_at: Int;
  previous_until: Int;
  waiting: Int;
}

export interface AttemptRow {
  endpoint_id: Int;
  event_id: string;
  attempt: Int;
  at: Int;
  status: Int;
  error: string | null;
  duration_ms: Int;
}

const date = (ms: Int) => (ms === null ? null : new Date(Number(ms)));

export const toEndpoint = (row: EndpointRow): WebhookEndpointRecord => ({
  id: Number(row.id),
  url: row.url,
  description: row.description,
  createdAt: new Date(Number(row.created_at)),
  disabledAt: date(row.disabled_at),
  lastSuccessAt: date(row.last_success_at),
  lastFailureAt: date(row.last_failure_at),
  previousSecretUntil: date(row.previous_until),
  waiting: Number(row.waiting ?? 0),
});

export const toAttempt = (row: AttemptRow): WebhookAttemptRecord => ({
  endpointId: Number(row.endpoint_id),
  eventId: row.event_id,
  attempt: Number(row.attempt),
  at: new Date(Number(row.at)),
  status: row.status === null ? null : Number(row.status),
  error: row.error,
  durationMs: Number(row.duration_ms),
});

/** The secrets to sign with at `now`: the current one, and the replaced one while its grace lasts. */
export function secretsAt(now: number, secret: string, previous: string | null, until: Int): string[] {
  return previous !== null && until !== null && Number(until) > now ? [secret, previous] : [secret];
}

/**
 * Attempts kept per endpoint for `webhooks deliveries`, at least: besides, every attempt of an
 * event still waiting for it.
 */
export const ATTEMPTS_KEPT = 1000;

/** What finish reads of an endpoint before it writes outcomes, and writes back after (Unix ms). */
export interface EndpointState {
  failures: number;
  probeAt: number | null;
  lastSuccessAt: number | null;
  lastFailureAt: number | null;
  /** When its current run of failures began; null after a success. */
  failingSince: number | null;
  disabledAt: number | null;
}

/** A `webhook_endpoints` row's state columns, as both stores read them. */
export interface EndpointStateRow {
  failures: Int;
  probe_at: Int;
  last_success_at: Int;
  last_failure_at: Int;
  failing_since: Int;
  disabled_at: Int;
}

const ms = (value: Int) => (value === null ? null : Number(value));

export const toEndpointState = (row: EndpointStateRow): EndpointState => ({
  failures: Number(row.failures),
  probeAt: ms(row.probe_at),
  lastSuccessAt: ms(row.last_success_at),
  lastFailureAt: ms(row.last_failure_at),
  failingSince: ms(row.failing_since),
  disabledAt: ms(row.disabled_at),
});

/**
 * An endpoint's state after `outcomes`, its own and in the order they ended, as both stores write
 * it (finish): its last success and failure, its back-off (src/events/slots.ts, endpointAfter),
 * and disabled by a failure when it has had no success since that failure's
 * disableUnlessSuccessSince and was failing then, or when the failure gave its event up.
 * `disabled[i]`: outcome i disabled it. `releasedAt`: a success after it was down, at that time:
 * every delivery waiting for it is due then, all at that one instant, so they go in the feed's
 * order, oldest first.
 */
export function endpointAfterOutcomes(
  state: EndpointState,
  outcomes: readonly AttemptOutcome[],
  retryMs: number,
): { state: EndpointState; disabled: boolean[]; releasedAt: number | undefined } {
  let next = { ...state };
  let releasedAt: number | undefined;
  const disabled = outcomes.map((outcome) => {
    const at = outcome.record.at.getTime();
    const backoff = endpointAfter(
      next,
      { ok: outcome.ok, at, retryAt: outcome.retryAt, jitter: outcome.jitter },
      retryMs,
    );
    next = { ...next, failures: backoff.failures, probeAt: backoff.probeAt };
    if (backoff.released) releasedAt = at;
    if (outcome.ok) {
      next.lastSuccessAt = at;
      next.failingSince = null;
      return false;
    }
    next.lastFailureAt = at;
    next.failingSince ??= at;
    const since = outcome.disableUnlessSuccessSince;
    const disables =
      next.disabledAt === null &&
      (next.lastSuccessAt ?? -1) < since &&
      (next.failingSince <= since || outcome.retryAt === undefined);
    if (disables) next.disabledAt = at;
    return disables;
  });
  return { state: next, disabled, releasedAt };
}

/** The endpoint as `webhooks test` sends to it: never shown, only signed with. */
export interface SigningTarget {
  url: string;
  /** The secrets to sign with now: the current one, then the one a roll replaced while its grace lasts. */
  secrets: string[];
  disabled: boolean;
}

/** Why a resend or replay sends nothing. */
export type ResendRefusal =
  | { kind: 'unknown_endpoint' }
  | { kind: 'disabled' }
  /** No kept event has this id, and none older than the oldest kept had it. */
  | { kind: 'unknown_event' }
  /** The event was deleted after PETSTORE_EVENT_RETENTION (or no event is kept since). */
  | { kind: 'expired_event' };

/**
 * A resend made due: the event had no delivery waiting for the endpoint (`none`: one is made),
 * one waiting for a retry (`waiting`: due now), or one being attempted (`in_flight`: left so).
 */
export type ResendOutcome = { kind: 'due'; before: 'none' | 'waiting' | 'in_flight' } | ResendRefusal;

/** Where a replay starts: after an event (as the feed's `after`), or at an instant (created then or later). */
export type ReplayFrom = { after: EventPosition } | { since: Date };

export type ReplayOutcome =
  | {
      kind: 'replayed';
      /** Events made due for the endpoint. */
      due: number;
      /** Events after that point already waiting for it (a delivery waiting, or not yet handed out). */
      waiting: number;
    }
  | ResendRefusal;

/**
 * The operators' tools (docs/webhooks.md#sending-again), kept by both stores beside the relay's
 * calls: they put deliveries in the store, and the relay of the running service sends them.
 */
export interface WebhookTools {
  /** The URL and secrets `webhooks test` signs a test event with, at `now`; undefined: no such endpoint. */
  signingTarget(id: number, now: number): Promise<SigningTarget | undefined>;
  /** Makes the kept event at `position` due for the endpoint at `now`: sent again, with the same webhook-id. */
  resend(endpointId: number, position: EventPosition, now: number): Promise<ResendOutcome>;
  /**
   * Makes every kept event after `from` due for the endpoint at `now`, oldest first, those the
   * endpoint has been handed (the events after its cursor are handed out anyway), without a
   * second delivery of one already waiting; REPLAY_BATCH events per transaction.
   */
  replay(endpointId: number, from: ReplayFrom, now: number): Promise<ReplayOutcome>;
}

/** Events a replay makes due per transaction: the API's writes go on between two. */
export const REPLAY_BATCH = 1000;

/** One batch of a replay: the events in it, how many were made due, and the last one's position. */
export interface ReplayBatch {
  events: number;
  due: number;
  last: EventPosition | undefined;
}

/**
 * Runs a replay's batches from `start`, each after the last event of the one before, until one
 * is not full; resolves to the events they held and how many were made due.
 */
export async function replayInBatches(
  start: EventPosition,
  batch: (after: EventPosition) => Promise<ReplayBatch>,
): Promise<{ events: number; due: number }> {
  let events = 0;
  let due = 0;
  for (let after: EventPosition | undefined = start; after;) {
    const done = await batch(after);
    events += done.events;
    due += done.due;
    after = done.events < REPLAY_BATCH ? undefined : done.last;
  }
  return { events, due };
}

/** The later of two positions, in the feed's order. */
export const laterOf = (a: EventPosition, b: EventPosition): EventPosition =>
  a.tx > b.tx || (a.tx === b.tx && a.seq > b.seq) ? a : b;
