import { METHODS } from 'node:http';
import fc from 'fast-check';

/**
 * A generated request. `{{key}}` (the valid API key), `{{id:N}}` (an id created earlier) and
 * `{{cursor:N}}` (a cursor served earlier) are filled in when it is sent, so a request can name
 * what exists by then while generation and shrinking stay pure.
 */
export interface PlannedRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Uint8Array;
  /** How a socket transport bends the HTTP/1.1 framing itself; `inject` cannot and ignores it. */
  wire?: WireFault;
}

export const wireFaults = [
  'chunked',
  'short-length',
  'no-length',
  'huge-header',
  'control-in-header',
  'unknown-method',
  'lowercase-method',
  'http/1.0',
  'space-in-target',
  'absolute-target',
  'unknown-expect',
  'expect-continue',
  'no-host',
  'connect',
] as const;
export type WireFault = (typeof wireFaults)[number];

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

const visibleAscii = fc.integer({ min: 0x21, max: 0x7e }).map((code) => String.fromCharCode(code));
/** Characters a header value may carry (RFC 9110 field-vchar, SP, HTAB, obs-text). */
const headerChar = fc.oneof(
  { weight: 8, arbitrary: visibleAscii },
  { weight: 1, arbitrary: fc.constantFrom(' ', '\t') },
  { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xff }).map((code) => String.fromCharCode(code)) },
);
const headerText = fc.string({ unit: headerChar, maxLength: 40 });
const urlSafe = fc.string({ unit: fc.constantFrom(...'abcXYZ019-._~'), minLength: 1, maxLength: 12 });

/** Any code point, as a URL or header cannot hold it raw: percent-encoded UTF-8. */
const encodedText = fc.string({ unit: 'grapheme', maxLength: 12 }).map(encodeURIComponent);

const method = fc.oneof(
  { weight: 10, arbitrary: fc.constantFrom('GET', 'POST') },
  { weight: 2, arbitrary: fc.constant('HEAD') },
  { weight: 3, arbitrary: fc.constantFrom(...METHODS.filter((m) => m !== 'CONNECT')) },
);

const idSegment = fc.oneof(
  { weight: 6, arbitrary: fc.nat(50).map((n) => `{{id:${n}}}`) },
  { weight: 1, arbitrary: fc.bigInt({ min: INT64_MIN, max: INT64_MAX * 4n }).map(String) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '0',
      '-1',
      'abc',
      '1.5',
      '7.0',
      '1e2',
      '+1',
      '01',
      '9223372036854775807',
      '9223372036854775808',
      '99999999999999999999',
      '%31',
      '%',
      '%zz',
      '%00',
      '%2F',
      '..',
      '__proto__',
      'constructor',
    ),
  },
  { weight: 1, arbitrary: encodedText.filter((text) => text !== '') },
  { weight: 1, arbitrary: fc.nat({ max: 12_000 }).map((n) => '9'.repeat(n + 1)) },
);

const path = fc.oneof(
  { weight: 8, arbitrary: fc.constant('/v1/pets') },
  { weight: 6, arbitrary: idSegment.map((id) => `/v1/pets/${id}`) },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      '/v1/pets/',
      '/v1/pets/1/',
      '/v1/pets/1/tags',
      '/v1/animals',
      '/v1',
      '/v1/',
      '/',
      '/V1/PETS',
      '/v1//pets',
      '/v2/pets',
      '/v1/pets%2F1',
      '/v1/%70ets',
      '/v1/pets/..%2F..%2Fetc%2Fpasswd',
      '/%',
      '/v1/openapi.json/x',
    ),
  },
  { weight: 1, arbitrary: fc.array(urlSafe, { minLength: 1, maxLength: 4 }).map((parts) => `/${parts.join('/')}`) },
);

const limitValue = fc.oneof(
  { weight: 4, arbitrary: fc.integer({ min: 1, max: 100 }).map(String) },
  {
    weight: 2,
    arbitrary: fc.constantFrom('0', '101', '-1', 'abc', '1.5', '5.0', '1e1', '+5', '05', '', ' 5', '%35', '1%00'),
  },
  { weight: 1, arbitrary: fc.bigInt({ min: -(10n ** 30n), max: 10n ** 30n }).map(String) },
);
const statusValue = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('available', 'pending', 'sold') },
  { weight: 1, arbitrary: fc.constantFrom('lost', 'AVAILABLE', '', 'sold%00', 'pending ') },
  { weight: 1, arbitrary: encodedText },
);
const cursorValue = fc.oneof(
  { weight: 3, arbitrary: fc.nat(20).map((n) => `{{cursor:${n}}}`) },
  { weight: 1, arbitrary: fc.string({ unit: fc.constantFrom(...'ABCabc019-_='), maxLength: 30 }) },
  {
    weight: 1,
    arbitrary: fc
      .tuple(fc.constantFrom('', 'available', 'sold', 'lost'), fc.bigInt({ min: -1n, max: 2n ** 64n }))
      .map(([status, id]) => Buffer.from(`${status}:${id}`).toString('base64url')),
  },
);
const queryPart = fc.oneof(
  { weight: 4, arbitrary: limitValue.map((v) => `limit=${v}`) },
  { weight: 3, arbitrary: statusValue.map((v) => `status=${v}`) },
  { weight: 2, arbitrary: cursorValue.map((v) => `cursor=${v}`) },
  {
    weight: 1,
    arbitrary: fc.constantFrom('limt=5', '__proto__=1', 'constructor=x', 'limit', '=', '&', '%zz=1', 'a=%'),
  },
  { weight: 1, arbitrary: fc.tuple(encodedText, encodedText).map(([k, v]) => `${k}=${v}`) },
);
const query = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  { weight: 4, arbitrary: fc.array(queryPart, { minLength: 1, maxLength: 4 }).map((parts) => `?${parts.join('&')}`) },
);

const authorization = fc.oneof(
  { weight: 20, arbitrary: fc.constant('Bearer {{key}}') },
  {
    weight: 2,
    arbitrary: fc.constantFrom(
      'bearer {{key}}',
      'BEARER {{key}}',
      'Bearer  {{key}}',
      'Bearer {{key}}x',
      'Bearer',
      'Bearer ',
      '',
      'Basic dXNlcjpwYXNz',
      'Token {{key}}',
      'Bearer psk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA',
    ),
  },
  { weight: 1, arbitrary: headerText.map((text) => `Bearer ${text}`) },
  { weight: 1, arbitrary: headerText },
);
const contentType = fc.oneof(
  { weight: 12, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8') },
  {
    weight: 3,
    arbitrary: fc.constantFrom(
      'Application/JSON',
      'application/json;charset=UTF-8',
      'application/json; charset="utf-8"',
      'application/json; charset=latin1',
      'application/json; charset=utf-16',
      'application/json; foo=bar',
      'text/plain',
      'text/json',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/problem+json',
      'application/jsonx',
      '*/*',
      '',
    ),
  },
  { weight: 1, arbitrary: headerText },
);
const idempotencyKey = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom('k1', 'k2', 'k3', '"k1"', 'retry-7') },
  { weight: 1, arbitrary: fc.constantFrom('', ' ', '"', '"unterminated', 'a'.repeat(256), 'caf\u00e9', 'a b') },
  { weight: 1, arbitrary: headerText },
);

/** Present in `present` of every `absent + present` requests. */
const sometimes = <T>(arbitrary: fc.Arbitrary<T>, absent: number, present = 1) =>
  fc.oneof({ weight: absent, arbitrary: fc.constant(undefined) }, { weight: present, arbitrary });

const headers = fc
  .record({
    // Most requests carry the key and a JSON type: else nearly every answer would be a 401 or 415.
    authorization: fc.oneof(
      { weight: 6, arbitrary: fc.constant('Bearer {{key}}') },
      { weight: 1, arbitrary: authorization },
    ),
    'content-type': sometimes(contentType, 1, 6),
    'idempotency-key': sometimes(idempotencyKey, 6),
    accept: sometimes(fc.constantFrom('application/json', '*/*', 'text/html', 'application/xml'), 3),
    'x-fuzz': sometimes(headerText, 6),
  })
  .map((fields) => {
    const present = Object.entries(fields).filter((entry): entry is [string, string] => entry[1] !== undefined);
    return Object.fromEntries(present);
  });

/** Any valid name: 1..255 code points, not only white space, no Cc, no lone surrogate. */
export const validName = fc
  .oneof(
    { weight: 6, arbitrary: fc.string({ unit: 'grapheme', minLength: 1, maxLength: 24 }) },
    { weight: 1, arbitrary: fc.string({ unit: 'grapheme-ascii', minLength: 200, maxLength: 255 }) },
    { weight: 1, arbitrary: fc.constantFrom('Rex', ' Rex ', 'Zoë', '\u00a0x', 'نمر', '🐈\u200d⬛', 'a\u0301', '"\\/') },
  )
  .filter((name) => {
    const points = [...name];
    return points.length >= 1 && points.length <= 255 && /^(?!\p{White_Space}*$)[^\p{Cc}\p{Cs}]*$/u.test(name);
  });

const categoryId = fc.oneof(
  { weight: 3, arbitrary: fc.bigInt({ min: INT64_MIN, max: INT64_MAX }) },
  { weight: 1, arbitrary: fc.constantFrom(INT64_MIN, INT64_MAX, 0n, -1n, 2n ** 53n + 1n, -(2n ** 53n) - 1n) },
);

/** An int64 written as JSON Schema still calls an integer: `7`, `7.0`, `7e0`, `70e-1`. */
const integerText = fc
  .tuple(categoryId, fc.constantFrom('plain', 'fraction', 'exponent', 'scaled'))
  .map(([value, form]) => {
    if (form === 'fraction') return `${value}.0`;
    if (form === 'exponent') return `${value}e0`;
    if (form === 'scaled') return `${value}0E-1`;
    return String(value);
  });

const status = fc.constantFrom('available', 'pending', 'sold');

/** A JSON string literal: as JSON.stringify writes it, or with every non-ASCII unit escaped. */
const stringLiteral = (text: string, escapeAll: boolean) =>
  escapeAll
    ? JSON.stringify(text).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
    : JSON.stringify(text);

type Member = [string, string];

const validMembers = fc
  .record(
    { name: validName, categoryId: integerText, status, escapeAll: fc.boolean(), withStatus: fc.boolean() },
    { requiredKeys: ['name', 'categoryId', 'escapeAll', 'withStatus'] },
  )
  .map(({ name, categoryId, status, escapeAll, withStatus }): Member[] => [
    ['"name"', stringLiteral(name, escapeAll)],
    ['"categoryId"', categoryId],
    ...(withStatus && status ? [['"status"', JSON.stringify(status)] as Member] : []),
  ]);

const badValue = fc.oneof(
  fc.constantFrom(
    '""',
    '" "',
    '"\\u00a0\\u2003"',
    '"a\\u0000"',
    '"a\\u0085"',
    '"\\ud800"',
    '"\\udc00x"',
    '"7"',
    'null',
    'true',
    '[]',
    '{}',
    '1.5',
    '-0.5',
    '1e-5',
    '1e400',
    '-1e400',
    '9223372036854775808',
    '-9223372036854775809',
    '123456789012345678901234567890',
    '"AVAILABLE"',
    '"lost"',
    `"${'a'.repeat(256)}"`,
    `"${'🐈'.repeat(256)}"`,
  ),
  fc.jsonValue({ maxDepth: 2 }).map((value) => JSON.stringify(value) ?? 'null'),
);

/** Field names a message must not echo as they are: control characters, a lone surrogate, 2,000 characters. */
const oddNames = ['"\\u001b[31mred\\n"', '"\\u0085\\u2028"', '"\\ud800"', JSON.stringify('f'.repeat(2000))];

/** One step away from valid: a field dropped, added, repeated or given a wrong value. */
const nearlyValidMembers = fc
  .tuple(validMembers, fc.nat(), fc.constantFrom('drop', 'add', 'repeat', 'replace'), badValue, urlSafe)
  .map(([members, at, how, value, field]): Member[] => {
    const i = at % members.length;
    const copy = [...members];
    if (how === 'drop') copy.splice(i, 1);
    if (how === 'replace') copy[i] = [copy[i]![0], value];
    if (how === 'repeat') copy.push(copy[i]!);
    if (how === 'add') {
      const names = ['"id"', '"__proto__"', '"constructor"', '"Name"', JSON.stringify(field), ...oddNames];
      const name = names[at % names.length]!;
      copy.push([name, value]);
    }
    return copy;
  });

const spaces = fc.constantFrom('', ' ', '\n', '\t', '\r\n  ');
const objectText = fc
  .tuple(
    fc.oneof({ weight: 2, arbitrary: validMembers }, { weight: 1, arbitrary: nearlyValidMembers }),
    spaces,
    fc.boolean(),
  )
  .chain(([members, gap, shuffle]) =>
    (shuffle ? fc.shuffledSubarray(members, { minLength: members.length }) : fc.constant(members)).map(
      (ordered) => `{${gap}${ordered.map(([k, v]) => `${k}${gap}:${gap}${v}`).join(`,${gap}`)}${gap}}`,
    ),
  );

const hostileText = fc.oneof(
  objectText.chain((text) => fc.nat(text.length).map((cut) => text.slice(0, cut))),
  fc.integer({ min: 1, max: 3000 }).map((n) => '['.repeat(n) + ']'.repeat(n)),
  fc.integer({ min: 1, max: 2000 }).map((n) => '{"a":'.repeat(n) + '1' + '}'.repeat(n)),
  fc.integer({ min: 1, max: 3000 }).map((n) => '['.repeat(n)),
  fc.constantFrom('', ' ', 'null', '[]', '"x"', '0', '{', '}', '{"name":"Rex","categoryId":7}]', '\ufeff{}'),
  fc.json({ maxDepth: 3 }),
  validMembers.map((members) => `[{${members.map(([k, v]) => `${k}:${v}`).join(',')}}]`),
  fc.nat({ max: 4000 }).map((n) => `{"name":"Rex","categoryId":7${' '.repeat(16 * 1024 + n)}}`),
);

const utf8 = (text: string) => new Uint8Array(Buffer.from(text, 'utf8'));

/** Characters no error message may carry raw: C0 and C1 controls, DEL, a line separator. */
const controlChar = fc.constantFrom('\n', '\r', '\u001b', '\u0000', '\u007f', '\u0085', '\u009b', '\u2028');

/** A body: valid, nearly valid or hostile JSON text, or raw bytes (invalid UTF-8 among them), or text with a raw control character. */
export const body = fc.oneof(
  { weight: 6, arbitrary: objectText.map(utf8) },
  { weight: 3, arbitrary: hostileText.map(utf8) },
  { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }) },
  {
    weight: 1,
    arbitrary: fc.tuple(objectText, fc.nat(), fc.constantFrom(0xff, 0xc0, 0xed, 0x80, 0x00)).map(([text, at, byte]) => {
      const bytes = [...utf8(text)];
      bytes.splice(at % (bytes.length + 1), 0, byte);
      return new Uint8Array(bytes);
    }),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(objectText, fc.nat(), controlChar).map(([text, at, c]) => {
      const i = at % (text.length + 1);
      return utf8(text.slice(0, i) + c + text.slice(i));
    }),
  },
);

/** Requests across the whole surface, most of them aimed at the three operations. */
export const plannedRequest: fc.Arbitrary<PlannedRequest> = fc
  .record({
    method,
    path,
    query,
    headers,
    body: fc.option(body, { nil: undefined, freq: 4 }),
    postToPets: fc.nat(9),
    wire: sometimes(fc.constantFrom(...wireFaults), 6),
  })
  .map(({ method, path, query, headers, body, postToPets, wire }) => {
    // A good share of createPet attempts, so that valid and nearly valid bodies reach it.
    const create = postToPets < 3;
    const request: PlannedRequest = {
      method: create ? 'POST' : method,
      url: create ? '/v1/pets' : path + query,
      headers,
    };
    if (body !== undefined || create) request.body = body ?? new Uint8Array();
    if (wire) request.wire = wire;
    return request;
  });
