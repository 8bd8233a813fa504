import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { parse } from 'lossless-json';

/** What came back for one request, whatever carried it (inject or a socket). */
export interface WireResponse {
  status: number;
  headers: Record<string, string>;
  body: string;
}

interface Operation {
  method: string;
  template: PathTemplate;
  operationId: string;
  /** Status → media type → compiled body schema (undefined: no body documented). */
  responses: Map<string, Map<string, ValidateFunction> | undefined>;
}

const UNPRINTABLE =
  // eslint-disable-next-line no-control-regex -- matching control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
/** Longest message: a sentence, with at most a 64-character echo of the request in it. */
const MESSAGE_LIMIT = 400;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * JSON numbers as Ajv sees them, decided on the exact text: an integer outside int64 (which a
 * double cannot tell apart from the largest int64) becomes NaN, which no `integer` schema admits.
 */
function readNumber(text: string): number {
  if (/^-?[0-9]+$/.test(text) && text.replace(/^-/, '').length >= 16) {
    const value = BigInt(text);
    return value < INT64_MIN || value > INT64_MAX ? NaN : Number(text);
  }
  return Number(text);
}

/** Parses a JSON body exactly as a strict client would; throws on anything that is not JSON. */
export function parseJson(text: string): unknown {
  return parse(text, null, readNumber);
}

type PathTemplate = (string | undefined)[];

/** The template's segments: a literal, or undefined for a `{parameter}`. */
function readTemplate(base: string, template: string): PathTemplate {
  return (base + template).split('/').map((part) => (/^\{[^}]+\}$/.test(part) ? undefined : part));
}

/**
 * The path's segments as the router reads them: each percent-decoded on its own, so `%2F`
 * stays inside its segment (RFC 3986 section 2.2); undefined when one does not decode.
 */
function readSegments(url: string): string[] | undefined {
  try {
    return url.split('?')[0]!.split('/').map(decodeURIComponent);
  } catch {
    return undefined;
  }
}

function matches(template: PathTemplate, url: string): boolean {
  const segments = readSegments(url);
  return (
    segments !== undefined &&
    segments.length === template.length &&
    template.every((literal, i) => literal === undefined || literal === segments[i])
  );
}

/**
 * A checker of responses against the served OpenAPI 3.1 document, with Ajv's JSON Schema
 * 2020-12 validator (the dialect OpenAPI 3.1 uses); `$ref`s resolve into the document itself.
 */
export class DocumentChecker {
  readonly #operations: Operation[] = [];
  readonly #paths: PathTemplate[] = [];
  /** The error catalogue the document publishes: code → HTTP status. */
  readonly catalogue = new Map<string, number>();
  readonly #error: ValidateFunction;

  constructor(document: Record<string, unknown>) {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    // OpenAPI format registry: int32 and int64 are signed integers of that width.
    ajv.addFormat('int64', { type: 'number', validate: (n: number) => Number.isInteger(n) });
    ajv.addFormat('int32', { type: 'number', validate: (n: number) => n >= -(2 ** 31) && n < 2 ** 31 });
    ajv.addSchema({ ...document, $id: 'urn:petstore:openapi' });
    const compile = (pointer: string) => ajv.compile({ $ref: `urn:petstore:openapi#${pointer}` });
    const escape = (part: string) => part.replace(/~/g, '~0').replace(/\//g, '~1');

    const base = new URL((document.servers as { url: string }[])[0]!.url).pathname.replace(/\/$/, '');
    for (const [template, item] of Object.entries(document.paths as Record<string, Record<string, unknown>>)) {
      this.#paths.push(readTemplate(base, template));
      for (const [method, operation] of Object.entries(
        item as Record<string, { operationId: string; responses: object }>,
      )) {
        const responses = new Map<string, Map<string, ValidateFunction> | undefined>();
        for (const [status, response] of Object.entries(operation.responses as Record<string, { content?: object }>)) {
          const pointer = `/paths/${escape(template)}/${method}/responses/${status}`;
          const content = response.content
            ? new Map(
                Object.keys(response.content).map((type) => [
                  type,
                  compile(`${pointer}/content/${escape(type)}/schema`),
                ]),
              )
            : undefined;
          responses.set(status, content);
        }
        this.#operations.push({
          method: method.toUpperCase(),
          template: readTemplate(base, template),
          operationId: operation.operationId,
          responses,
        });
      }
    }
    this.#error = compile('/components/schemas/Error');
    const info = document.info as { description: string };
    for (const [, code, status] of info.description.matchAll(/^\| `([a-z_]+)` \| ([0-9]{3}) \|$/gm)) {
      this.catalogue.set(code!, Number(status));
    }
  }

  /** The documented operation a request reaches (HEAD reaches GET's, RFC 9110), if any. */
  operationFor(method: string, url: string): Operation | undefined {
    const wanted = method === 'HEAD' ? 'GET' : method;
    return this.#operations.find((operation) => operation.method === wanted && matches(operation.template, url));
  }

  /**
   * What is wrong with `response` to `method url` by the document, or undefined when nothing
   * is. A request outside every operation may get only an answer from the published catalogue:
   * 404 for a path the document does not list, 405 with Allow for one it lists, 414 for an
   * over-long URL, and 400, 408 or 431 for what the HTTP parser refuses.
   */
  check(method: string, url: string, response: WireResponse): string | undefined {
    const { status } = response;
    if (status >= 500) return `answered ${status}: ${response.body.slice(0, 300)}`;
    // docs/api.md#limits: every 429, whichever limit sent it, names its wait and its policy.
    if (status === 429) {
      const missing = ['retry-after', 'ratelimit-policy', 'ratelimit'].filter((name) => !response.headers[name]);
      if (missing.length > 0) return `a 429 without ${missing.join(', ')}`;
    }
    const operation = this.operationFor(method, url);
    let schemas: Map<string, ValidateFunction> | undefined;
    if (operation) {
      if (!operation.responses.has(String(status))) {
        return `${operation.operationId} answered ${status}, which the document does not list for it: ${response.body.slice(0, 300)}`;
      }
      schemas = operation.responses.get(String(status));
    } else {
      const listed = this.#paths.some((template) => matches(template, url));
      // What the HTTP layer refuses before any route runs (docs/api.md#limits, docs/api.md#errors).
      const allowed = [listed ? 405 : 404, 400, 408, 414, 431];
      if (!allowed.includes(status)) {
        return `${method} ${url.slice(0, 80)} is outside the document's operations and answered ${status}, not one of ${allowed.join(', ')}`;
      }
      if (status === 405 && !response.headers['allow']) return '405 without an Allow header (RFC 9110 section 15.5.6)';
      schemas = new Map([['application/json', this.#error]]);
    }
    return this.#checkBody(method, response, schemas);
  }

  #checkBody(method: string, response: WireResponse, schemas: Map<string, ValidateFunction> | undefined) {
    if (method === 'HEAD' || !schemas) {
      return response.body === '' ? undefined : `a body where none belongs: ${response.body.slice(0, 200)}`;
    }
    const type = (response.headers['content-type'] ?? '').split(';')[0]!.trim().toLowerCase();
    const validate = schemas.get(type);
    if (!validate) return `Content-Type ${JSON.stringify(type)} is not one the document lists (${[...schemas.keys()]})`;
    let body: unknown;
    try {
      body = parseJson(response.body);
    } catch (error) {
      return `the body is not JSON (${(error as Error).message}): ${response.body.slice(0, 200)}`;
    }
    if (!validate(body)) {
      return `the ${response.status} body does not match the document: ${JSON.stringify(validate.errors)}; body ${response.body.slice(0, 300)}`;
    }
    // The Error schema's status and code must agree with the answer and with the published catalogue.
    if (this.#error(body)) {
      const { code, status } = body as { code: string; status: number };
      if (status !== response.status || this.catalogue.get(code) !== status) {
        return `Error body ${code}/${status} on a ${response.status} answer (catalogue: ${code} is ${this.catalogue.get(code)})`;
      }
      // docs/hardening.md#error-messages: one line, no control character or lone surrogate, however sent.
      const { message } = body as { message: string };
      if (UNPRINTABLE.test(message) || message.length > MESSAGE_LIMIT) {
        return `the Error message is not one short printable line: ${JSON.stringify(message.slice(0, 300))}`;
      }
    }
    return undefined;
  }
}
