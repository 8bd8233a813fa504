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

export interface ClaimQuery {
  /** Unix ms. */
  now: number;
  limit: number;
  /** The lease lasts until now + leaseMs; past it another relay may take the delivery over. */
  leaseMs: number;
  /** Who holds the lease: the relay's own random id. */
  owner: string;
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
  /** The endpoint's newest attempts, newest first; undefined when no endpoint has this id. */
  listAttempts(id: number, limit: number): Promise<WebhookAttemptRecord[] | undefined>;
  /**
   * Copies up to `batch` events per enabled endpoint into its deliveries, due at `now`, for
   * endpoints that have fewer than `window` deliveries waiting; resolves to how many were copied.
   */
  handOut(now: number, batch: number, window: number): Promise<number>;
  /** Leases up to `limit` due deliveries of enabled endpoints, counting an attempt for each. */
  claim(query: ClaimQuery): Promise<ClaimedDelivery[]>;
  /**
   * Records attempts and their consequences, all in one transaction: each delivery removed
   * (success, give-up) or due again at `retryAt`, the endpoint's last success or failure, and
   * the endpoint disabled when it has failed every attempt for the give-up period (see
   * disableUnlessSuccessSince). Resolves to whether each attempt disabled its endpoint.
   */
  finish(outcomes: AttemptOutcome[]): Promise<boolean[]>;
  /**
   * Called as a relay starts. SQLite, which one process serves: ends every lease, since none
   * can belong to a live relay, so a restart after kill -9 resends at once. PostgreSQL: nothing
   * (other instances hold live leases; an abandoned one expires).
   */
  recover(): Promise<void>;
  /** Ends a lease without an attempt recorded (a relay stopping): the delivery is due at once. */
  release(endpointId: number, position: EventPosition, owner: string): Promise<void>;
  stats(): Promise<WebhookStats>;
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
