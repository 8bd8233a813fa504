import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import type { Scope } from '../schemas.js';
import { ApiError } from '../errors.js';
import {
  answerHeaders,
  commonErrors,
  eitherPolicyHeaders,
  errorResponse,
  forbiddenResponse,
  ListEventsQuery,
  rateLimitHeaders,
  type ListEventsQuery as EventsQuery,
} from '../schemas.js';
import type { Store } from '../store/store.js';
import { eventJson } from './event-json.js';
import { formatEventId, parseEventId } from './ids.js';

export interface EventsDeps {
  store: Store;
  /** The `onRequest` hook that admits a request with a key holding `scope` (http/auth.ts). */
  authenticate: (scope: Scope) => onRequestHookHandler;
}

const JSON_TYPE = 'application/json; charset=utf-8';
const LONGEST_LINK = `</v1/events?limit=100&after=evt_${'0'.repeat(32)}>; rel="next"`;

/** `GET /v1/events`: the feed, oldest first, a page at a time (docs/events.md). */
export function listEvents(app: FastifyInstance, { store, authenticate }: EventsDeps) {
  app.get<{ Querystring: EventsQuery }>(
    '/v1/events',
    {
      onRequest: authenticate('events:read'),
      schema: {
        operationId: 'listEvents',
        tags: ['events'],
        summary: 'List events, oldest first, a page at a time',
        description:
          'Every event the service wrote and still keeps (PETSTORE_EVENT_RETENTION, 30 days by default), oldest first, after the event named by `after`. When more events follow than `limit`, the response carries `Link: <…&after=…>; rel="next"`. Following those links visits every event exactly once, in order, even while animals are being created by any number of instances; at the end of the feed, keep the last id and ask again later with `after`.',
        security: [{ apiKey: ['events:read'] }],
        querystring: ListEventsQuery,
        response: {
          200: {
            description: 'A page of events, oldest first.',
            headers: {
              ...answerHeaders,
              Link: {
                type: 'string',
                maxLength: LONGEST_LINK.length,
                pattern: '^</v1/events\\?limit=[1-9][0-9]*&after=evt_[0-9a-f]{32}>; rel="next"$',
                description: 'RFC 8288: the next page, rel="next", when more events follow.',
              },
              ...rateLimitHeaders,
            },
            type: 'array',
            items: { $ref: 'Event#' },
            maxItems: 100,
          },
          400: errorResponse(
            'invalid_request: a query parameter is invalid, repeated or unknown; or the request is not valid HTTP/1.1, refused before its key is read.',
            eitherPolicyHeaders,
          ),
          403: forbiddenResponse('events:read'),
          ...commonErrors,
        },
      },
    },
    async (request, reply) => {
      const { limit = 20, after } = request.query;
      const position = after === undefined ? undefined : readAfter(after);
      const events = await store.listEvents({ after: position, limit: limit + 1 }, request.apiKeyId);
      if (events.length > limit) {
        events.length = limit;
        const last = formatEventId(events[limit - 1]!.position);
        reply.header('link', `</v1/events?limit=${limit}&after=${last}>; rel="next"`);
      }
      return reply.type(JSON_TYPE).send(`[${events.map(eventJson).join(',')}]`);
    },
  );
}

function readAfter(text: string) {
  const position = parseEventId(text);
  if (!position) {
    throw new ApiError(
      'invalid_request',
      'Query parameter \'after\' is not the id of an event; use an id the feed listed, or the rel="next" link as given.',
    );
  }
  return position;
}
