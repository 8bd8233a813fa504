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
export interface WebhookStore {
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

type Int = bigint | number | null;

// The rows both stores read, and what they make of them.

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

/** Attempts kept per endpoint for `webhooks deliveries`. */
export const ATTEMPTS_KEPT = 100;
