import { SpanKind, SpanStatusCode, trace, type Attributes, type Span } from '@opentelemetry/api';
import {
  StoreUnavailableError,
  type EventQuery,
  type IdempotencyClaim,
  type KeyRoll,
  type KeyUse,
  type ListQuery,
  type NewKeyRecord,
  type NewPetRecord,
  type PetRecord,
  type Read,
  type Store,
  type StoredResponse,
} from './store.js';
import type { WebhookStore } from './webhooks.js';

/** Hears of every Store call once it settles: its method, whether it failed, and how long it took. */
export type ObserveCall = (method: string, failed: boolean, seconds: number) => void;

const tracer = trace.getTracer('petstore.store');

/** `error`, or an error it was caused by, that `matches` accepts. */
function causedBy(error: unknown, matches: (error: unknown) => boolean): boolean {
  for (let depth = 0; error instanceof Error && depth < 4; depth++, error = error.cause) {
    if (matches(error)) return true;
  }
  return false;
}

/**
 * The Store the service's requests use: each call of `inner` timed for `observe`, and a disk
 * error (a full disk, an I/O error: `inner.isDiskError`) turned into StoreUnavailableError, so
 * the client gets 503 `unavailable`, not 500. After one, `ping` rejects (`/readyz` answers 503)
 * until a write succeeds again: a request's, or the `probeWrite` each ping tries meanwhile, so an
 * instance that no traffic reaches finds out too.
 *
 * @example const store = new InstrumentedStore(await openStore(config), (method, failed, s) => …);
 */
export class InstrumentedStore implements Store {
  readonly #inner: Store;
  readonly #observe: ObserveCall;
  readonly #spanAttributes: Attributes;
  #diskFailure: StoreUnavailableError | undefined;
  #webhooks: WebhookStore | undefined;

  /** `system` names the database in each call's span: `sqlite` or `postgresql` (OpenTelemetry's db.system.name). */
  constructor(inner: Store, observe: ObserveCall, system = 'sqlite') {
    this.#inner = inner;
    this.#observe = observe;
    this.#spanAttributes = { 'db.system.name': system, 'db.system': system };
  }

  get idsVisibleInOrder() {
    return this.#inner.idsVisibleInOrder;
  }

  /**
   * The relay's calls, timed like the others (`webhooks.claim`, `webhooks.finish`, …): background
   * work, so never a request's span.
   */
  get webhooks(): WebhookStore {
    return (this.#webhooks ??= this.#watchWebhooks(this.#inner.webhooks));
  }

  /** `inner` with every call that answers a promise timed as `webhooks.<method>`; the others as they are. */
  #watchWebhooks(inner: WebhookStore): WebhookStore {
    const watched: Record<string, unknown> = {};
    for (const [name, member] of Object.entries(inner) as [string, unknown][]) {
      if (typeof member !== 'function') {
        watched[name] = member;
        continue;
      }
      watched[name] = (...args: unknown[]) => {
        const started = performance.now();
        const answer: unknown = member.apply(inner, args);
        return answer instanceof Promise ? this.#watch(`webhooks.${name}`, false, started, answer) : answer;
      };
    }
    return watched as unknown as WebhookStore;
  }

  get replication() {
    return this.#inner.replication;
  }

  isDiskError(error: unknown) {
    return this.#inner.isDiskError(error);
  }

  /**
   * `call`'s outcome, timed from `started` (read before the call is made: arguments are evaluated
   * in order), with a disk error made StoreUnavailableError; a write that succeeds ends a disk
   * failure. A call made inside a traced request is a child span of it, `store.<method>`
   * (docs/operations.md#tracing); outside one (tracing off, or background work such as
   * rate-count batches) there is no span, and no more work than the lookup of the active one.
   */
  #watch<T>(method: string, write: boolean, started: number, call: Promise<T>): Promise<T> {
    const span = trace.getActiveSpan() && this.#startSpan(method);
    return call.then(
      (result) => {
        this.#succeeded(method, write, started, span);
        return result;
      },
      (error: unknown) => {
        this.#observe(method, true, (performance.now() - started) / 1000);
        const failure = this.#failed(error);
        if (span) {
          // The error's class only: a message may quote what the caller sent.
          span.setStatus({ code: SpanStatusCode.ERROR });
          span.setAttribute('error.type', (failure as Error)?.constructor?.name ?? 'Error');
          span.end();
        }
        throw failure;
      },
    );
  }

  /** #watch for a read that may answer at once (Read): a value is passed on as it is, no promise made. */
  #watchRead<T>(method: string, started: number, call: Read<T>): Read<T> {
    if (call instanceof Promise) return this.#watch(method, false, started, call);
    this.#succeeded(method, false, started, trace.getActiveSpan() && this.#startSpan(method));
    return call;
  }

  #succeeded(method: string, write: boolean, started: number, span: Span | undefined): void {
    this.#observe(method, false, (performance.now() - started) / 1000);
    span?.end();
    if (write) this.#diskFailure = undefined;
  }

  #startSpan(method: string): Span {
    return tracer.startSpan(`store.${method}`, { kind: SpanKind.CLIENT, attributes: this.#spanAttributes });
  }

  #failed(error: unknown): unknown {
    if (!causedBy(error, (cause) => this.#inner.isDiskError(cause))) return error;
    this.#diskFailure = error instanceof StoreUnavailableError ? error : new StoreUnavailableError(error);
    return this.#diskFailure;
  }

  async ping() {
    if (this.#diskFailure) {
      try {
        await this.#inner.probeWrite();
        this.#diskFailure = undefined;
      } catch (error) {
        throw this.#failed(error);
      }
    }
    return this.#watch('ping', false, performance.now(), this.#inner.ping());
  }

  probeWrite() {
    return this.#watch('probeWrite', true, performance.now(), this.#inner.probeWrite());
  }

  migrate(onApplied?: (name: string, ms: number) => void) {
    return this.#watch('migrate', true, performance.now(), this.#inner.migrate(onApplied));
  }

  createPet(pet: NewPetRecord, keyId?: number) {
    return this.#watch('createPet', true, performance.now(), this.#inner.createPet(pet, keyId));
  }

  createPetOnce(pet: NewPetRecord, claim: IdempotencyClaim, respond: (pet: PetRecord) => StoredResponse) {
    return this.#watch('createPetOnce', true, performance.now(), this.#inner.createPetOnce(pet, claim, respond));
  }

  getPet(id: bigint, keyId?: number) {
    return this.#watchRead('getPet', performance.now(), this.#inner.getPet(id, keyId));
  }

  listPets(query: ListQuery, keyId?: number) {
    return this.#watchRead('listPets', performance.now(), this.#inner.listPets(query, keyId));
  }

  listEvents(query: EventQuery, keyId?: number) {
    return this.#watch('listEvents', false, performance.now(), this.#inner.listEvents(query, keyId));
  }

  // Not a write that ends a disk failure: deleting (or finding nothing to delete) says nothing
  // about whether a create would find room.
  pruneEvents(before: Date, limit: number) {
    return this.#watch('pruneEvents', false, performance.now(), this.#inner.pruneEvents(before, limit));
  }

  countPetsByStatus() {
    return this.#watch('countPetsByStatus', false, performance.now(), this.#inner.countPetsByStatus());
  }

  createKey(key: NewKeyRecord) {
    return this.#watch('createKey', true, performance.now(), this.#inner.createKey(key));
  }

  findActiveKey(hash: Buffer) {
    return this.#watch('findActiveKey', false, performance.now(), this.#inner.findActiveKey(hash));
  }

  // Written off the request path, in batches, whoever used the keys: not a request's store call.
  writeKeyUses(uses: KeyUse[]) {
    return this.#inner.writeKeyUses(uses);
  }

  writeDeprecatedUses(uses: KeyUse[]) {
    return this.#inner.writeDeprecatedUses(uses);
  }

  listKeys() {
    return this.#watch('listKeys', false, performance.now(), this.#inner.listKeys());
  }

  rollKey(roll: KeyRoll) {
    return this.#watch('rollKey', true, performance.now(), this.#inner.rollKey(roll));
  }

  createFirstKey(key: NewKeyRecord) {
    return this.#watch('createFirstKey', true, performance.now(), this.#inner.createFirstKey(key));
  }

  revokeKey(id: number, at: Date) {
    return this.#watch('revokeKey', true, performance.now(), this.#inner.revokeKey(id, at));
  }

  addHits(windowStart: number, subjects: string[], hits: number[]) {
    return this.#watch('addHits', false, performance.now(), this.#inner.addHits(windowStart, subjects, hits));
  }

  onKeysChanged(listener: () => void) {
    this.#inner.onKeysChanged(listener);
  }

  close() {
    return this.#inner.close();
  }
}
