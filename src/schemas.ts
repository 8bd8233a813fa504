import { Type, type Static } from '@sinclair/typebox';

export const INT64_MIN = -(2n ** 63n);
export const INT64_MAX = 2n ** 63n - 1n;

/**
 * int64 as the contract means it: the full range, exact. On the wire it is a JSON number;
 * in the service it is a `bigint`, so nothing past 2^53 is rounded. The bounds are JSON Schema
 * numbers, which a double holds only to the nearest: the `int64` validation keyword checks the
 * exact range (validation.ts) and the served document writes the exact bounds (docs.ts).
 */
export const Int64 = (options: { description: string; minimum?: 1; examples?: number[] }) =>
  Type.Unsafe<bigint>({
    type: 'integer',
    format: 'int64',
    minimum: Number(INT64_MIN),
    maximum: Number(INT64_MAX),
    ...options,
  });

export const petStatuses = ['available', 'pending', 'sold'] as const;
export type PetStatus = (typeof petStatuses)[number];
export const PetStatus = Type.Unsafe<PetStatus>({
  $id: 'PetStatus',
  type: 'string',
  enum: [...petStatuses],
  description: 'status must be one of available, pending, sold.',
});

/**
 * A pet's name, and an API key's (`keys create --name`): 1 to 255 code points, not only Unicode
 * White_Space, no control character (Cc) or lone surrogate (Cs) (docs/api.md#validation).
 */
export const Name = Type.String({
  minLength: 1,
  maxLength: 255,
  pattern: '^(?!\\p{White_Space}*$)[^\\p{Cc}\\p{Cs}]*$',
  examples: ['Rex'],
  description:
    'name must be a string of 1 to 255 Unicode characters that is not only white space and holds no control character or lone surrogate; it is kept exactly as sent.',
});

const categoryId = Int64({
  examples: [7],
  description:
    'categoryId must be an integer from -9223372036854775808 to 9223372036854775807 (int64); it comes back digit for digit.',
});

export const NewPet = Type.Object(
  {
    name: Name,
    categoryId,
    status: Type.Optional(Type.Ref(PetStatus, { default: 'available' })),
  },
  {
    $id: 'NewPet',
    additionalProperties: false,
    description: 'An animal to add. Unknown fields, including id, are refused with a 400.',
  },
);
export type NewPet = Static<typeof NewPet>;

export const Pet = Type.Object(
  {
    id: Int64({
      minimum: 1,
      examples: [42],
      description: 'Assigned by the service: positive, never reused, increasing in creation order.',
    }),
    name: Name,
    categoryId,
    status: Type.Ref(PetStatus),
  },
  { $id: 'Pet', additionalProperties: false },
);
export type Pet = Static<typeof Pet>;

export const Pets = Type.Array(Type.Ref(Pet));

export const eventTypes = ['pet.created'] as const;
export type EventType = (typeof eventTypes)[number];

/** `evt_` and 32 hexadecimal digits (events/ids.ts): fixed width, so ids compare as strings in feed order. */
export const EVENT_ID_PATTERN = '^evt_[0-9a-f]{32}$';

export const Event = Type.Object(
  {
    id: Type.String({
      minLength: 36,
      maxLength: 36,
      pattern: EVENT_ID_PATTERN,
      examples: ['evt_00000000000005e2000000000000002a'],
      description:
        'Unique, and never given twice, even after a restore of an older backup; opaque, but ordered: ids increase in the order the feed lists events, and compare as plain strings in that order.',
    }),
    type: Type.Unsafe<EventType>({
      type: 'string',
      enum: [...eventTypes],
      maxLength: 11,
      description: 'What happened: pet.created, an animal was added (data is the animal).',
    }),
    createdAt: Type.String({
      format: 'date-time',
      minLength: 24,
      maxLength: 24,
      pattern: '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z$',
      examples: ['2026-11-22T10:00:00.123Z'],
      description: 'When the event was written, RFC 3339 in UTC, to the millisecond.',
    }),
    data: Type.Ref(Pet, {
      description: 'The animal exactly as createPet answered it with 201: the same fields, the same digits.',
    }),
  },
  {
    $id: 'Event',
    additionalProperties: false,
    description:
      'Something that happened in the catalogue, written in the same transaction as the change it announces.',
  },
);
export type Event = Static<typeof Event>;

export const errorCodes = {
  invalid_request: 400,
  unauthorized: 401,
  forbidden: 403,
  not_found: 404,
  method_not_allowed: 405,
  request_timeout: 408,
  idempotency_conflict: 409,
  gone: 410,
  payload_too_large: 413,
  uri_too_long: 414,
  unsupported_media_type: 415,
  idempotency_mismatch: 422,
  rate_limited: 429,
  headers_too_large: 431,
  internal_error: 500,
  unavailable: 503,
} as const;
export type ErrorCode = keyof typeof errorCodes;

export const ErrorBody = Type.Object(
  {
    code: Type.Unsafe<ErrorCode>({
      type: 'string',
      enum: Object.keys(errorCodes),
      examples: ['invalid_request'],
      description: 'Stable snake_case word; see the table in the API description.',
    }),
    message: Type.String({
      // One sentence of fixed words and at most a few pieces of the request, each cut to 64
      // characters (errors.ts echo); one line: no control character or lone surrogate.
      maxLength: 1024,
      pattern: '^[^\\p{Cc}\\p{Cs}]*$',
      examples: ['limit must be an integer from 1 to 100, written in decimal digits with no sign and no leading zero.'],
      description: 'One sentence a person can act on, naming what is at fault.',
    }),
    status: Type.Integer({
      format: 'int32',
      minimum: 400,
      maximum: 599,
      examples: [400],
      description: 'The HTTP status code of the response.',
    }),
  },
  { $id: 'Error', additionalProperties: false },
);

export const ListPetsQuery = Type.Object(
  {
    limit: Type.Optional(
      Type.Integer({
        format: 'int32',
        minimum: 1,
        maximum: 100,
        default: 20,
        description:
          'limit must be an integer from 1 to 100, written in decimal digits with no sign and no leading zero.',
      }),
    ),
    status: Type.Optional(Type.Ref(PetStatus)),
    cursor: Type.Optional(
      Type.String({
        // base64url of `<status>:<id>[@<position>]` (cursor.ts), at most `available:`, 19 digits,
        // `@` and 20 digits: 67 characters. Anything longer or outside the alphabet was never
        // issued: a 400 either way.
        maxLength: 67,
        pattern: '^[A-Za-z0-9_-]+$',
        description:
          'cursor must be the opaque value of a rel="next" link from an earlier page, used with the same status.',
      }),
    ),
  },
  { additionalProperties: false },
);
export type ListPetsQuery = { limit: number; status?: PetStatus; cursor?: string };

export const ListEventsQuery = Type.Object(
  {
    after: Type.Optional(
      Type.String({
        minLength: 36,
        maxLength: 36,
        pattern: EVENT_ID_PATTERN,
        description:
          'after must be the id of an event as the feed listed it (evt_ and 32 lowercase hexadecimal digits); the page starts after it.',
      }),
    ),
    limit: ListPetsQuery.properties.limit,
  },
  { additionalProperties: false },
);
export type ListEventsQuery = { after?: string; limit: number };

export const GetPetParams = Type.Object({
  petId: Int64({
    minimum: 1,
    examples: [42],
    description: 'petId is the id of an animal, a positive int64 written in decimal digits.',
  }),
});
export type GetPetParams = { petId: bigint };

export type ErrorBody = Static<typeof ErrorBody>;

export const CreatePetHeaders = Type.Object({
  'idempotency-key': Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: 257,
      // Visible ASCII only: the bare key and the quoted sf-string are both written in it.
      pattern: '^[!-~]+$',
      examples: ['8e03978e-40d5-43e8-bc93-6894a57f9324'],
      description:
        'Idempotency-Key must be 1 to 255 visible ASCII characters, bare (abc-123) or as a quoted string ("abc-123"); retries of one request send the same key.',
    }),
  ),
});

export const sharedSchemas = [PetStatus, NewPet, Pet, Event, ErrorBody];

/**
 * A response header as the document describes it: every value the service writes fits its
 * `maxLength` and its `pattern` or `enum`. Response headers are not validated; they describe.
 */
export interface HeaderDoc {
  type: 'string';
  description: string;
  maxLength: number;
  pattern?: string;
  enum?: string[];
}
export type HeaderDocs = Record<string, HeaderDoc>;

/**
 * Fields of every answer the service gives (limits.ts guardRequest, request-log.ts), errors
 * included; the answers Node's HTTP parser refuses (answerParserRefusal) carry no request id.
 */
export const answerHeaders: HeaderDocs = {
  'X-Request-Id': {
    type: 'string',
    maxLength: 128,
    pattern: '^[!-~]+$',
    description:
      "The caller's X-Request-Id when it is 1 to 128 visible ASCII characters, else a new UUID; it names the request in the service's log.",
  },
  'Cache-Control': {
    type: 'string',
    maxLength: 8,
    enum: ['no-store'],
    description: 'Answers are per key and change with every write.',
  },
  'X-Content-Type-Options': {
    type: 'string',
    maxLength: 7,
    enum: ['nosniff'],
    description: 'Browsers take the Content-Type as sent.',
  },
};

/** The fields of an answer that Node's HTTP parser refuses before any route runs (client-errors.ts). */
const parserAnswerHeaders: HeaderDocs = {
  'Cache-Control': answerHeaders['Cache-Control']!,
  'X-Content-Type-Options': answerHeaders['X-Content-Type-Options']!,
  Connection: {
    type: 'string',
    maxLength: 5,
    enum: ['close'],
    description: 'The connection is closed after this answer.',
  },
};

/** A documented response whose body is the Error schema, with the fields of every answer and `headers`. */
export function errorResponse(description: string, headers?: HeaderDocs) {
  return { description, headers: { ...answerHeaders, ...headers }, $ref: 'Error#' };
}

/**
 * A response whose body is the Error schema, as Node's HTTP parser answers before any route
 * runs, with the refused-key fields of the peer's address.
 */
function parserRefusal(description: string) {
  return { description, headers: { ...parserAnswerHeaders, ...refusedKeyHeaders }, $ref: 'Error#' };
}

const CHALLENGE = 'Bearer realm="petstore"';

const authHeader: HeaderDocs = {
  'WWW-Authenticate': {
    type: 'string',
    maxLength: 64,
    enum: [CHALLENGE, `${CHALLENGE}, error="invalid_token"`],
    description: 'Bearer realm="petstore", with error="invalid_token" when a key was sent and refused (RFC 6750).',
  },
};

/**
 * The 403 of an operation that needs `scope` (docs/keys.md#scopes): a valid key without it.
 *
 * @example
 * response: { 403: forbiddenResponse('pets:write'), ...commonErrors }
 */
export function forbiddenResponse(scope: string) {
  const challenge = `${CHALLENGE}, error="insufficient_scope", scope="${scope}"`;
  return errorResponse(
    `forbidden: the API key is valid but does not hold the scope ${scope}. The request counts against the key's rate limit, which is judged first: past it, the answer is 429.`,
    {
      'WWW-Authenticate': {
        type: 'string',
        maxLength: challenge.length,
        enum: [challenge],
        description: `${challenge} (RFC 6750 section 3.1).`,
      },
      ...rateLimitHeaders,
    },
  );
}

// The IETF httpapi RateLimit fields (rate-limit.ts): a policy name, a quota of at most
// 1000000000 (PETSTORE_RATE_LIMIT, PETSTORE_AUTH_FAILURE_LIMIT) and seconds of at most 86400
// (PETSTORE_RATE_LIMIT_WINDOW).
const POLICY = '^"(default|refused-keys)";q=[1-9][0-9]*;w=[1-9][0-9]*$';
const REMAINING = '^"(default|refused-keys)";r=(0|[1-9][0-9]*);t=[1-9][0-9]*$';
const retryAfter = (description: string): HeaderDoc => ({
  type: 'string',
  maxLength: 5,
  pattern: '^[1-9][0-9]*$',
  description,
});

/**
 * The RateLimit fields of every answer to a request whose key was counted: once the key was
 * found valid, whatever the answer (a 403 included). Absent when rate limits are off.
 */
export const rateLimitHeaders: HeaderDocs = {
  'RateLimit-Policy': {
    type: 'string',
    maxLength: 64,
    pattern: POLICY,
    description:
      'The API key\'s quota: `"default";q=<requests>;w=<seconds>`; on every answer once the key was found valid and counted, absent when rate limits are off.',
  },
  RateLimit: {
    type: 'string',
    maxLength: 64,
    pattern: REMAINING,
    description: 'What is left of it: `"default";r=<requests left>;t=<seconds until the window ends>`.',
  },
};

/**
 * The RateLimit fields of the refused-key limit of the client's address (docs/api.md#rate-limits),
 * on answers given before any valid key was read: a 401, and refusals made before the key is
 * looked at (400 for malformed HTTP, 408, 414, 431). Nothing but a refused key is counted.
 * Absent when that limit is off (PETSTORE_AUTH_FAILURE_LIMIT=off).
 */
export const refusedKeyHeaders: HeaderDocs = {
  'RateLimit-Policy': {
    type: 'string',
    maxLength: 64,
    pattern: '^"refused-keys";q=[1-9][0-9]*;w=[1-9][0-9]*$',
    description:
      'The client address\'s quota of refused API keys: `"refused-keys";q=<refused keys>;w=<seconds>`; sent while that limit is on (PETSTORE_AUTH_FAILURE_LIMIT, on by default), absent when it is off.',
  },
  RateLimit: {
    type: 'string',
    maxLength: 64,
    pattern: '^"refused-keys";r=(0|[1-9][0-9]*);t=[1-9][0-9]*$',
    description:
      'What is left of it: `"refused-keys";r=<refused keys left>;t=<seconds until the window ends>`. Past it, a refused key gets 429.',
  },
};

/**
 * The RateLimit fields of a 400 that may come before the key is read (malformed HTTP or
 * framing: the address's refused-key fields) or after it was counted (the key's own).
 */
export const eitherPolicyHeaders: HeaderDocs = {
  'RateLimit-Policy': {
    type: 'string',
    maxLength: 64,
    pattern: POLICY,
    description:
      'The API key\'s quota `"default";q=<requests>;w=<seconds>` once the key was counted; for a request refused before its key was read (malformed HTTP or framing), the client address\'s `"refused-keys";q=<refused keys>;w=<seconds>` while that limit is on.',
  },
  RateLimit: {
    type: 'string',
    maxLength: 64,
    pattern: REMAINING,
    description: 'What is left of that policy: `"<policy>";r=<left>;t=<seconds until the window ends>`.',
  },
};

/** The error responses every authenticated operation can give. */
export const commonErrors = {
  // A key sent and refused is counted against the address; no usable credentials are not, but
  // the answer shows the address's budget all the same (auth.ts).
  401: errorResponse(
    "unauthorized: the API key is missing, not Bearer, unknown, revoked or expired. A key sent and refused counts against the client address's refused-key limit; a request without usable credentials does not, but its answer shows what is left.",
    { ...authHeader, ...refusedKeyHeaders },
  ),
  408: parserRefusal(
    'request_timeout: the request was not received in time; the connection is closed. A 408 for headers that did not arrive carries the refused-key fields; one for a body that stopped arriving, after the key was counted, carries none.',
  ),
  414: errorResponse('uri_too_long: the URL is over 8 KiB; refused before the key is read.', refusedKeyHeaders),
  429: errorResponse(
    'rate_limited: the API key made too many requests in this window, or the key was refused and its address had sent too many refused keys in this window (a valid key from that address is still served).',
    {
      'Retry-After': retryAfter('Seconds until requests are admitted again.'),
      'RateLimit-Policy': {
        type: 'string',
        maxLength: 64,
        pattern: POLICY,
        description:
          'The policy that refused the request: the API key\'s `"default";q=<requests>;w=<seconds>`, or the address\'s `"refused-keys";q=<refused keys>;w=<seconds>`.',
      },
      RateLimit: {
        type: 'string',
        maxLength: 64,
        pattern: REMAINING,
        description: 'What is left of it: `"<policy>";r=0;t=<seconds until the window ends>`.',
      },
    },
  ),
  431: parserRefusal('headers_too_large: the request headers are over 16 KiB in all.'),
  500: errorResponse('internal_error: the service failed; the request may be retried.', rateLimitHeaders),
  503: errorResponse(
    'unavailable: the database cannot be reached (with read replicas: a write while the primary does not answer); retry after Retry-After seconds.',
    { 'Retry-After': retryAfter('Seconds to wait before retrying.'), ...rateLimitHeaders },
  ),
};

/** The 409 of an Idempotency-Key whose first request is still being processed (idempotency.ts). */
export const idempotencyRetryAfter: HeaderDocs = {
  'Retry-After': retryAfter('Seconds to wait before retrying.'),
};

/** createPet's 415 for a content-encoded body (src/http/json.ts): the one coding it takes. */
export const acceptEncodingHeader: HeaderDocs = {
  'Accept-Encoding': {
    type: 'string',
    maxLength: 8,
    enum: ['identity'],
    description:
      'On a 415 for a body sent with a Content-Encoding (gzip, say): bodies are taken as they are, never content-encoded (RFC 9110 section 12.5.3).',
  },
};

/** createPet's Location: the new animal's path (docs/api.md#operations). */
export const locationHeader: HeaderDoc = {
  type: 'string',
  maxLength: 28,
  pattern: '^/v1/pets/[1-9][0-9]*$',
  description: '/v1/pets/{id} of the new animal.',
};

/** What a key may do (docs/keys.md#scopes): listPets and getPet, createPet, `GET /metrics`, and listEvents. */
export const scopes = ['pets:read', 'pets:write', 'metrics:read', 'events:read'] as const;
export type Scope = (typeof scopes)[number];

/**
 * What a key holds when issued without `--scope`, as every key issued before scopes existed:
 * the first three. `events:read` is given only when asked for.
 */
export const defaultScopes: readonly Scope[] = ['pets:read', 'pets:write', 'metrics:read'];

export function isScope(word: string): word is Scope {
  return (scopes as readonly string[]).includes(word);
}
