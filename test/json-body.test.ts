import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { FastifyRequest } from 'fastify';
import { parse } from 'lossless-json';
import { parseJsonBody, toInt64 } from '../src/http/json.js';

const request = { headers: { 'content-type': 'application/json' } } as unknown as FastifyRequest;
const strict = (text: string) => parse(text, null, { parseNumber: (n: string) => toInt64(n) ?? Number(n) });

// Bodies JSON.parse reads (plain integers), and bodies only the strict parser reads exactly.
const BODIES = [
  '{"name":"Rex","categoryId":7}',
  '{"name":"Rex","categoryId":-0,"status":"sold"}',
  '{"name":"Rex","categoryId":123456789012345}',
  '{"name":"Rex","categoryId":-123456789012345}',
  '{"name":"R\\u00e9x \\ud83d\\udc36","categoryId":1}',
  '{"a":[1,[2,[3,{"b":-4}]],true,false,null,"5"],"e":"1e5 1.5"}',
  '{"__proto__":7,"constructor":{"x":[]}}',
  ' \n\t{ "name" : "Rex" , "categoryId" : 42 } \r\n',
  '[]',
  '"text"',
  '12',
  'null',
  '{"name":"Rex","categoryId":1234567890123456}',
  '{"name":"Rex","categoryId":9007199254740993}',
  '{"name":"Rex","categoryId":9223372036854775807}',
  '{"name":"Rex","categoryId":-9223372036854775808}',
  '{"name":"Rex","categoryId":9223372036854775808}',
  '{"name":"Rex","categoryId":7.0}',
  '{"name":"Rex","categoryId":7e2}',
  '{"name":"Rex","categoryId":1.5}',
  '{"name":"Rex","categoryId":1.00000000000000001}',
  '{"name":"Rex","categoryId":1E400}',
  '{"a":[0.5,-1e-3,10]}',
];

test('every JSON body reads the same as with the strict parser: each integer a bigint, exact', () => {
  for (const text of BODIES) {
    assert.deepEqual(parseJsonBody(request, Buffer.from(text)), strict(text), text);
  }
  const pet = parseJsonBody(request, Buffer.from('{"name":"Rex","categoryId":7}')) as Record<string, unknown>;
  assert.equal(pet.categoryId, 7n);
  assert.equal(Object.getPrototypeOf(parseJsonBody(request, Buffer.from('{"__proto__":7}'))), Object.prototype);
});

test('a key sent twice or nesting past 32 levels is refused whichever way the body is read', () => {
  assert.throws(
    () => parseJsonBody(request, Buffer.from('{"name":"Rex","name":"Rex"}')),
    /names the field 'name' twice/,
  );
  assert.throws(() => parseJsonBody(request, Buffer.from('{"a":1,"b":{"c":2,"c":2}}')), /names the field 'c' twice/);
  assert.throws(() => parseJsonBody(request, Buffer.from(`${'['.repeat(33)}${']'.repeat(33)}`)), /deeper than 32/);
  assert.ok(parseJsonBody(request, Buffer.from(`${'['.repeat(32)}${']'.repeat(32)}`)));
  assert.throws(() => parseJsonBody(request, Buffer.from('{"name":"Rex",}')), /not valid JSON/);
});
