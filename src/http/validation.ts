import { Ajv, type ErrorObject, type SchemaObject, type ValidateFunction } from 'ajv';
import type { FastifySchema } from 'fastify';
import { ApiError, echo } from '../errors.js';
import { INT64_MAX, INT64_MIN, sharedSchemas } from '../schemas.js';

type Part = 'body' | 'querystring' | 'params' | 'headers';

const isInt64 = (schema: SchemaObject) => schema.type === 'integer' && schema.format === 'int64';

/**
 * Ajv cannot check a `bigint`, so every `{ type: 'integer', format: 'int64' }` is checked by
 * the `int64` keyword instead; the served document keeps the standard form.
 */
function forAjv(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(forAjv);
  if (schema === null || typeof schema !== 'object') return schema;
  const source = schema as SchemaObject;
  if (isInt64(source)) {
    const { type: _type, format: _format, minimum, maximum: _maximum, ...rest } = source;
    return { ...rest, int64: { minimum: minimum === undefined ? INT64_MIN : BigInt(minimum) } };
  }
  return Object.fromEntries(Object.entries(source).map(([key, value]) => [key, forAjv(value)]));
}

const ajv = new Ajv({
  allErrors: false,
  coerceTypes: false,
  removeAdditional: false,
  useDefaults: true,
  verbose: true,
  strict: true,
  // OpenAPI annotations that are not JSON Schema validation keywords.
  keywords: ['example'],
  // OpenAPI's int32 only documents: the schemas that name it bound the integer themselves.
  // date-time describes answers (Event.createdAt): no request carries one.
  formats: { int32: true, 'date-time': true },
});
ajv.addKeyword({
  keyword: 'int64',
  schemaType: 'object',
  validate: (rule: { minimum: bigint }, data: unknown) =>
    typeof data === 'bigint' && data >= rule.minimum && data <= INT64_MAX,
});

// The schemas with an `$id` that route schemas reference: static, so added once.
for (const schema of sharedSchemas) ajv.addSchema(forAjv(schema) as SchemaObject);

/**
 * Ajv's own cache is keyed by the schema object, and forAjv makes a new one on every call: the
 * functions are kept here by the schema's content instead, so every app built in a process (one
 * per test, one per instance) compiles each schema once.
 */
const validators = new Map<string, ValidateFunction>();

function compiled(schema: unknown): ValidateFunction {
  const text = JSON.stringify(schema, (_key, value: unknown) => (typeof value === 'bigint' ? `${value}n` : value));
  let validate = validators.get(text);
  if (!validate) validators.set(text, (validate = ajv.compile(forAjv(schema) as SchemaObject)));
  return validate;
}

const DIGITS = /^(0|[1-9][0-9]*)$/;

/**
 * Query and path values arrive as strings; an integer is accepted only as plain decimal digits.
 * Converts in place: the object is the request's own, fresh from the parser (and without a
 * prototype, so a `__proto__` parameter stays a parameter and is refused as unknown).
 */
function coerceStrings(data: Record<string, unknown>, schema: SchemaObject): Record<string, unknown> {
  const properties = (schema.properties ?? {}) as Record<string, SchemaObject>;
  for (const [key, value] of Object.entries(data)) {
    if (Array.isArray(value)) {
      throw new ApiError('invalid_request', `Query parameter '${echo(key)}' must be given at most once.`);
    }
    const property = properties[key];
    if (typeof value === 'string' && property?.type === 'integer' && DIGITS.test(value)) {
      // Too many digits for the type is out of range: the schema refuses it with its own rule.
      if (isInt64(property)) data[key] = value.length <= 19 ? BigInt(value) : INT64_MAX + 1n;
      else data[key] = value.length <= 15 ? Number(value) : Number.MAX_SAFE_INTEGER;
    }
  }
  return data;
}

const labels: Record<Part, string> = {
  body: 'Field',
  querystring: 'Query parameter',
  params: 'Path parameter',
  headers: 'Header',
};

/** One sentence naming what is wrong, from Ajv's error (the last one is the outermost). */
function describe(error: ErrorObject, part: Part): string {
  const label = labels[part];
  if (error.keyword === 'required') return `${label} '${error.params.missingProperty}' is required.`;
  if (error.keyword === 'additionalProperties') {
    const allowed = Object.keys((error.parentSchema?.properties ?? {}) as object).join(', ');
    return `${label} '${echo(String(error.params.additionalProperty))}' is not allowed; the allowed ones are ${allowed}.`;
  }
  const field = error.instancePath.split('/').slice(1).join('.');
  if (field === '') return part === 'body' ? 'The request body must be a JSON object.' : `The ${part} is invalid.`;
  // Every field schema's description states its whole rule as one sentence.
  const rule = error.parentSchema?.description;
  return typeof rule === 'string' ? rule : `${label} '${field}' is invalid.`;
}

/**
 * Fastify validator compiler: strict Ajv (no coercion of bodies, no silent removal of
 * unknown fields, int64 as `bigint`), with errors already in the contract's words.
 */
export function compileValidator({ schema, httpPart }: { schema: FastifySchema; httpPart?: string }) {
  const part = (httpPart ?? 'body') as Part;
  const validate = compiled(schema);
  const stringly = part === 'querystring' || part === 'params';
  return (data: unknown) => {
    try {
      const value = stringly ? coerceStrings((data ?? {}) as Record<string, unknown>, schema as SchemaObject) : data;
      if (validate(value)) return { value };
      // A path that names no animal is not found, however it is malformed (docs/api.md#deprecation-of-getpet).
      if (part === 'params') {
        const rule = validate.errors!.at(-1)!.parentSchema?.description;
        return {
          error: new ApiError('not_found', `Nothing is at this path: ${rule ?? 'a path parameter is invalid.'}`),
        };
      }
      return { error: new ApiError('invalid_request', describe(validate.errors!.at(-1)!, part)) };
    } catch (error) {
      return { error: error as Error };
    }
  };
}
