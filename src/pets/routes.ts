import type {
  FastifyInstance,
  FastifyReply,
  FastifyRequest,
  HookHandlerDoneFunction,
  onRequestHookHandler,
} from 'fastify';
import type { Scope } from '../schemas.js';
import type { Config } from '../config.js';
import { ApiError, unsupportedMediaType } from '../errors.js';
import { continueOnceAdmitted } from '../http/methods.js';
import {
  commonErrors,
  errorResponse,
  forbiddenResponse,
  CreatePetHeaders,
  GetPetParams,
  ListPetsQuery,
  type NewPet,
  type PetStatus,
  type ListPetsQuery as ListQuery,
  type GetPetParams as PetParams,
  rateLimitHeaders,
  refusedKeyHeaders,
  eitherPolicyHeaders,
  answerHeaders,
  acceptEncodingHeader,
  idempotencyRetryAfter,
  locationHeader,
} from '../schemas.js';
import type { PetPage, PetRecord, Store } from '../store/store.js';
import { decodeCursor, encodeCursor, type Cursor } from './cursor.js';
import { deprecationHeaderDocs, deprecationHeaders } from './deprecation.js';
import type { PageCache } from './page-cache.js';
import { claimFor, InFlight, inFlight, mismatch, readIdempotencyKey } from './idempotency.js';

export interface PetDeps {
  store: Store;
  config: Config;
  /**
   * The `onRequest` hook that admits a request with a key holding `scope` (http/auth.ts); it
   * reads the service's clock onto `request.now`, which the routes' time checks use.
   */
  authenticate: (scope: Scope) => onRequestHookHandler;
  /** Where listPets keeps the pages it may send again; absent when the store's pages can change. */
  pages?: PageCache;
  /** Counts a call of a deprecated operation (petstore_deprecated_requests_total, http/metrics.ts). */
  countDeprecatedCall?: (operation: 'getPet') => void;
  /** Notes that a key called a deprecated operation (keys/memory.ts). */
  noteDeprecatedUse?: (apiKeyId: number, now: number) => void;
}

const JSON_TYPE = 'application/json; charset=utf-8';

// OpenAPI 3.1 lets a bearer scheme's requirement name the roles it needs: here, the key's scope.
const security = (scope: Scope) => [{ apiKey: [scope] }];

export function listPets(app: FastifyInstance, { store, authenticate, pages }: PetDeps) {
  app.get<{ Querystring: ListQuery }>(
    '/v1/pets',
    {
      onRequest: authenticate('pets:read'),
      // After the key check, before validation: a URL is kept only once the route answered it
      // 200, so its query was valid; the kept bytes are sent as they are.
      preValidation(request, reply, done) {
        const cached = pages?.get(request.url);
        if (!cached) return done();
        reply.header('link', cached.link).type(JSON_TYPE).send(cached.body);
      },
      schema: {
        operationId: 'listPets',
        tags: ['pets'],
        summary: 'List animals, oldest first, a page at a time',
        description:
          'Ascending id. When more animals match than `limit`, the response carries `Link: <…&cursor=…>; rel="next"`; following those links visits every animal that matched at the start exactly once, even while animals are added.',
        security: security('pets:read'),
        querystring: ListPetsQuery,
        response: {
          200: {
            description: 'A page of animals.',
            headers: {
              ...answerHeaders,
              // The longest: limit=100, status=available and a cursor of 67 characters.
              Link: {
                type: 'string',
                maxLength: 128,
                pattern: '^</v1/pets\\?[^>]+>; rel="next"$',
                description: 'RFC 8288: the next page, rel="next", when there is one.',
              },
              ...rateLimitHeaders,
            },
            type: 'array',
            items: { $ref: 'Pet#' },
            maxItems: 100,
          },
          400: errorResponse(
            'invalid_request: a query parameter is invalid, repeated or unknown; or the request is not valid HTTP/1.1, refused before its key is read.',
            eitherPolicyHeaders,
          ),
          403: forbiddenResponse('pets:read'),
          ...commonErrors,
        },
      },
    },
    (request, reply) => {
      const { limit = 20, status, cursor } = request.query;
      const after = cursor === undefined ? undefined : readCursor(cursor, status);
      const found = store.listPets(
        { status, afterId: after?.afterId, limit: limit + 1, atLeast: after?.readAt },
        request.apiKeyId,
      );
      // Rows read at once are sent at once: no promise for a synchronous read (Store's Read).
      if (found instanceof Promise) {
        return found.then((pets) => {
          sendPage(request.url, reply, pets);
        });
      }
      sendPage(request.url, reply, found);
      return undefined;
    },
  );

  /**
   * Sends `pets`, read with one more than the page's limit, as the page: with its `Link` when
   * another follows, kept to be sent again when the cache wants it.
   */
  function sendPage(url: string, reply: FastifyReply, pets: PetPage): FastifyReply {
    const { limit = 20, status } = reply.request.query as ListQuery;
    if (pets.length <= limit) return reply.send(pets);
    pets.length = limit;
    // With read replicas, the next page is read where this one's position is replayed.
    const next = encodeCursor({ afterId: pets[limit - 1]!.id, status, readAt: pets.readAt });
    const link = `</v1/pets?limit=${limit}${status ? `&status=${status}` : ''}&cursor=${next}>; rel="next"`;
    reply.header('link', link);
    if (!pages?.wanted(url)) return reply.send(pets);
    // The schema's serializer, as for any answer; the bytes are kept to be sent again.
    const body = reply.serialize(pets) as string;
    const page = { body, bytes: Buffer.byteLength(body), link };
    pages.set(url, page);
    return reply.type(JSON_TYPE).send(page.body);
  }
}

function readCursor(text: string, status: PetStatus | undefined): Cursor {
  const cursor = decodeCursor(text);
  if (!cursor) {
    throw new ApiError(
      'invalid_request',
      'Query parameter \'cursor\' is not one this service issued; follow the rel="next" link as given.',
    );
  }
  if (cursor.status !== status) {
    throw new ApiError(
      'invalid_request',
      `Query parameter 'cursor' was issued for ${cursor.status ? `status=${cursor.status}` : 'no status filter'}; use it with the same status.`,
    );
  }
  return cursor;
}

export function createPet(app: FastifyInstance, { store, authenticate }: PetDeps) {
  const inFlightHere = new InFlight();
  // Declared up front, so every request object keeps one shape.
  app.decorateRequest('idempotency', undefined);
  app.post<{ Body: NewPet }>(
    '/v1/pets',
    {
      onRequest: authenticate('pets:write'),
      preParsing: continueOnceAdmitted,
      preValidation: [requireJsonBody, readIdempotencyKey],
      schema: {
        operationId: 'createPet',
        tags: ['pets'],
        summary: 'Add an animal',
        description:
          'The 201 is sent once the animal is durable. With `Idempotency-Key`, a retry of the same body by the same API key within 24 hours gets the first response again and creates nothing; a retry while the first is still being processed gets 409, the key with a different body 422. A first request refused with a 4xx is not remembered.',
        security: security('pets:write'),
        headers: CreatePetHeaders,
        body: { $ref: 'NewPet#' },
        response: {
          201: {
            description: 'The animal as stored, with its new id; on a replay, the first response again.',
            headers: {
              ...answerHeaders,
              Location: locationHeader,
              'Idempotent-Replayed': {
                type: 'string',
                maxLength: 4,
                enum: ['true'],
                description:
                  '`true` when this is the stored first response to an earlier request with the same Idempotency-Key.',
              },
              ...rateLimitHeaders,
            },
            $ref: 'Pet#',
          },
          400: errorResponse(
            'invalid_request: the body is not a valid NewPet, or not valid JSON, or Idempotency-Key is malformed; or the request is not valid HTTP/1.1, refused before its key is read.',
            eitherPolicyHeaders,
          ),
          409: errorResponse(
            'idempotency_conflict: a request with this Idempotency-Key is still being processed; retry after Retry-After seconds.',
            { ...idempotencyRetryAfter, ...rateLimitHeaders },
          ),
          413: errorResponse('payload_too_large: the body is over 16 KiB.', rateLimitHeaders),
          415: errorResponse(
            'unsupported_media_type: the body is not sent as application/json (UTF-8), or is sent with a Content-Encoding (gzip, say): bodies are taken as they are, never content-encoded.',
            { ...rateLimitHeaders, ...acceptEncodingHeader },
          ),
          422: errorResponse(
            'idempotency_mismatch: this Idempotency-Key was used with a different body.',
            rateLimitHeaders,
          ),
          403: forbiddenResponse('pets:write'),
          ...commonErrors,
        },
      },
    },
    async (request, reply) => {
      const { name, categoryId, status = 'available' } = request.body;
      const pet = { name, categoryId, status };
      const { idempotency, apiKeyId } = request;
      if (!idempotency || apiKeyId === undefined) {
        const created = await store.createPet(pet, apiKeyId);
        return reply.code(201).header('location', `/v1/pets/${created.id}`).send(created);
      }
      const claim = claimFor(apiKeyId, idempotency, request.now);
      const outcome = await inFlightHere.hold(apiKeyId, idempotency.key, () =>
        store.createPetOnce(pet, claim, (created) => ({
          status: 201,
          body: reply.code(201).serialize(created) as string,
          location: `/v1/pets/${created.id}`,
        })),
      );
      if (outcome.kind === 'in_flight') throw inFlight();
      if (outcome.kind === 'mismatch') throw mismatch();
      const { response } = outcome;
      if (outcome.kind === 'replayed') reply.header('idempotent-replayed', 'true');
      return reply.code(response.status).header('location', response.location).type(JSON_TYPE).send(response.body);
    },
  );
}

// Fastify lets a bodiless POST with no Content-Type through; the contract makes it a 415.
function requireJsonBody(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction) {
  done(request.headers['content-type'] === undefined ? unsupportedMediaType() : undefined);
}

export function getPet(
  app: FastifyInstance,
  { store, config, authenticate, countDeprecatedCall, noteDeprecatedUse }: PetDeps,
) {
  const headers = deprecationHeaders(config);
  const sunsetMs = config.sunsetSeconds * 1000;
  app.get<{ Params: PetParams }>(
    '/v1/pets/:petId',
    {
      onRequest: authenticate('pets:read'),
      // Deprecated answers, errors included, carry the deprecation headers.
      preValidation: (request, reply, done) => {
        reply.headers(headers);
        // docs/operations.md#deprecated-use-the-clients-to-move-before-the-sunset: every admitted
        // call, whatever its answer, counted and noted against its key (in memory; written at
        // most once a minute per key, keys/uses.ts).
        countDeprecatedCall?.('getPet');
        // The clock as the key check read it (http/auth.ts): one reading per request.
        const { now } = request;
        if (request.apiKeyId !== undefined) noteDeprecatedUse?.(request.apiKeyId, now);
        done(
          now >= sunsetMs
            ? new ApiError('gone', 'getPet was removed on 2030-12-05; list animals with GET /v1/pets instead.')
            : undefined,
        );
      },
      schema: {
        operationId: 'getPet',
        tags: ['pets'],
        summary: 'Fetch one animal (deprecated: use GET /v1/pets)',
        description:
          'Deprecated since the Deprecation date, removed at the Sunset date (2030-12-05), after which it answers 410.',
        deprecated: true,
        security: security('pets:read'),
        params: GetPetParams,
        response: {
          200: {
            description: 'The animal.',
            headers: { ...answerHeaders, ...deprecationHeaderDocs, ...rateLimitHeaders },
            $ref: 'Pet#',
          },
          // Node's HTTP parser answers a malformed request to any path before a route runs.
          400: errorResponse(
            'invalid_request: the request is not valid HTTP/1.1 (request line or headers), refused before its key is read.',
            refusedKeyHeaders,
          ),
          404: errorResponse('not_found: no animal has this id, or petId is not a positive integer.', {
            ...deprecationHeaderDocs,
            ...rateLimitHeaders,
          }),
          410: errorResponse('gone: the sunset has passed; use GET /v1/pets.', {
            ...deprecationHeaderDocs,
            ...rateLimitHeaders,
          }),
          403: forbiddenResponse('pets:read'),
          ...commonErrors,
        },
      },
    },
    (request, reply) => {
      const { petId } = request.params;
      const found = store.getPet(petId, request.apiKeyId);
      // A row read at once is sent at once: no promise for a synchronous read (Store's Read).
      if (found instanceof Promise) return found.then((pet) => petOrNotFound(petId, pet));
      reply.send(petOrNotFound(petId, found));
      return undefined;
    },
  );
}

function petOrNotFound(id: bigint, pet: PetRecord | undefined): PetRecord {
  if (!pet) throw new ApiError('not_found', `No animal has id ${id}.`);
  return pet;
}
