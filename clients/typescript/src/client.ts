import createClient, { type Client } from 'openapi-fetch';
import { errorFromResponse, PetstoreError, type ErrorCode } from './errors.js';
import { parseBody, serializeBody } from './json.js';
import { findLink } from './link.js';
import type { components, paths } from './schema.js';

export type Pet = components['schemas']['Pet'];
export type NewPet = components['schemas']['NewPet'];
export type PetStatus = components['schemas']['PetStatus'];
/** `limit` (1..100), `status`, and the `cursor` of a next page. */
export type ListPetsQuery = NonNullable<paths['/pets']['get']['parameters']['query']>;
/** A `pet.created` event: `data` is the animal as createPet answered it. */
export type Event = components['schemas']['Event'];
/** `limit` (1..100) and `after`, the id of the last event already read. */
export type ListEventsQuery = NonNullable<paths['/events']['get']['parameters']['query']>;

export interface ClientOptions {
  /** The API's base address, as the document's `servers` list it: `https://petstore.example/v1`. */
  baseUrl: string;
  /** An API key (`psk_…`), sent as `Authorization: Bearer <key>`. */
  apiKey: string;
  /** The fetch to use; the global one by default. */
  fetch?: (request: Request) => Promise<Response>;
  /** Longest wait between two retries of createPet, whatever `Retry-After` asks. Default 5000. */
  maxRetryDelayMs?: number;
}

export interface PetPage {
  pets: Pet[];
  /** The query of the next page (from `Link: rel="next"`); absent on the last page. */
  next?: ListPetsQuery;
}

export interface EventPage {
  events: Event[];
  /** The query of the next page (from `Link: rel="next"`); absent when no more events follow yet. */
  next?: ListEventsQuery;
}

export interface CreatePetOptions {
  /**
   * Sent as `Idempotency-Key`: a repeat with the same key and body within 24 hours gets the
   * first answer and creates nothing. Generated when `retries` is set and no key is given.
   */
  idempotencyKey?: string;
  /**
   * How many times to send the request again, with the same key, after a network error, a 503
   * (`unavailable`) or a 409 (`idempotency_conflict`: the first attempt is still in progress).
   * Default 0.
   */
  retries?: number;
}

// Failures after which the request may or may not have been applied, or was not applied yet:
// safe to repeat only because the Idempotency-Key makes the service apply it at most once.
const RETRIED = new Set<ErrorCode>(['network_error', 'unavailable', 'idempotency_conflict']);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * A client for the Petstore API. Every method throws {@link PetstoreError} on failure; int64
 * fields (`id`, `categoryId`) are `bigint` both ways.
 *
 * @example
 * const petstore = new PetstoreClient({ baseUrl: 'http://127.0.0.1:8080/v1', apiKey: process.env.PETSTORE_KEY! });
 * const rex = await petstore.createPet({ name: 'Rex', categoryId: 7n }, { retries: 3 });
 * for await (const pet of petstore.pets({ status: 'available' })) console.log(pet.id, pet.name);
 */
export class PetstoreClient {
  readonly baseUrl: string;
  readonly #api: Client<paths>;
  readonly #maxRetryDelayMs: number;

  constructor({
    baseUrl,
    apiKey,
    fetch = (request) => globalThis.fetch(request),
    maxRetryDelayMs = 5000,
  }: ClientOptions) {
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this.#maxRetryDelayMs = maxRetryDelayMs;
    this.#api = createClient<paths>({
      baseUrl: this.baseUrl,
      fetch,
      headers: { authorization: `Bearer ${apiKey}`, accept: 'application/json' },
      bodySerializer: serializeBody,
    });
  }

  /** One page of animals, oldest first; `next` is the query of the following page. */
  async listPets(query: ListPetsQuery = {}): Promise<PetPage> {
    const { data, error, response } = await this.#send(() =>
      this.#api.GET('/pets', { params: { query }, parseAs: 'text' }),
    );
    if (error !== undefined || data === undefined) throw errorFromResponse(response, error);
    const pets = parseBody(data) as Pet[];
    const link = findLink(response.headers.get('link'), 'next', response.url || this.baseUrl);
    return link ? { pets, next: readQuery(link) } : { pets };
  }

  /**
   * Every animal matching `query`, oldest first, page after page, following `Link: rel="next"`
   * until there is none. Animals added meanwhile may appear; none is visited twice.
   *
   * @example
   * for await (const pet of petstore.pets({ status: 'sold', limit: 100 })) total += 1;
   */
  async *pets(query: Omit<ListPetsQuery, 'cursor'> = {}): AsyncGenerator<Pet, void, undefined> {
    let next: ListPetsQuery | undefined = query;
    while (next) {
      const page: PetPage = await this.listPets(next);
      yield* page.pets;
      next = page.next;
    }
  }

  /**
   * One page of events, oldest first (needs a key with the `events:read` scope). Without `next`,
   * the feed has nothing more yet: ask again later with `after` set to the last event's id.
   */
  async listEvents(query: ListEventsQuery = {}): Promise<EventPage> {
    const { data, error, response } = await this.#send(() =>
      this.#api.GET('/events', { params: { query }, parseAs: 'text' }),
    );
    if (error !== undefined || data === undefined) throw errorFromResponse(response, error);
    const events = parseBody(data) as Event[];
    const link = findLink(response.headers.get('link'), 'next', response.url || this.baseUrl);
    return link ? { events, next: readQuery(link) } : { events };
  }

  /** Adds an animal and returns it as stored, with its new id. */
  async createPet(pet: NewPet, { idempotencyKey, retries = 0 }: CreatePetOptions = {}): Promise<Pet> {
    const key = idempotencyKey ?? (retries > 0 ? globalThis.crypto.randomUUID() : undefined);
    for (let attempt = 0; ; attempt++) {
      try {
        return await this.#createOnce(pet, key);
      } catch (error) {
        const retry =
          error instanceof PetstoreError && key !== undefined && attempt < retries && RETRIED.has(error.code);
        if (!retry) throw error;
        await sleep(this.#retryDelay(attempt, error.retryAfter));
      }
    }
  }

  /**
   * Fetches one animal by id.
   *
   * @deprecated The service removes getPet on 2030-12-05 and answers 410 `gone` from then on.
   * Use {@link PetstoreClient.listPets} or {@link PetstoreClient.pets}, filtered by `status`.
   */
  async getPet(petId: bigint): Promise<Pet> {
    const { data, error, response } = await this.#send(() =>
      this.#api.GET('/pets/{petId}', { params: { path: { petId } }, parseAs: 'text' }),
    );
    if (error !== undefined || data === undefined) throw errorFromResponse(response, error);
    return parseBody(data) as Pet;
  }

  async #createOnce(pet: NewPet, key: string | undefined): Promise<Pet> {
    const { data, error, response } = await this.#send(() =>
      this.#api.POST('/pets', {
        params: { header: key === undefined ? {} : { 'idempotency-key': key } },
        body: pet,
        parseAs: 'text',
      }),
    );
    if (error !== undefined || data === undefined) throw errorFromResponse(response, error);
    return parseBody(data) as Pet;
  }

  /** Runs one request; a failure to get any answer becomes a `network_error`. */
  async #send<T>(request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new PetstoreError('network_error', `No answer from ${this.baseUrl}: ${reason}`, 0, undefined, {
        cause: error,
      });
    }
  }

  // Retry-After when the service sent it, else exponential backoff with full jitter.
  #retryDelay(attempt: number, retryAfter: number | undefined): number {
    const wanted = retryAfter !== undefined ? retryAfter * 1000 : Math.random() * 100 * 2 ** attempt;
    return Math.min(wanted, this.#maxRetryDelayMs);
  }
}

function readQuery<Query>(link: URL): Query {
  const query: Record<string, string | number> = {};
  for (const [name, value] of link.searchParams) query[name] = name === 'limit' ? Number(value) : value;
  return query as Query;
}
