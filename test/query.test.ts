import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseQuery } from '../src/http/query.js';

/** What URLSearchParams makes of `text`, in parseQuery's shape. */
function reference(text: string): Record<string, string | string[]> {
  const query: Record<string, string | string[]> = Object.create(null);
  for (const [key, value] of new URLSearchParams(text)) {
    const seen = query[key];
    query[key] = seen === undefined ? value : [...(Array.isArray(seen) ? seen : [seen]), value];
  }
  return query;
}

test('reads a query exactly as URLSearchParams does, with or without anything to decode', () => {
  const texts = [
    '',
    'limit=20',
    'limit=20&status=pending&cursor=OjEwMA',
    'a',
    'a=',
    '=b',
    'a=b=c',
    '&&a=1&&',
    'limit=5&limit=6&limit=7',
    '__proto__=1&constructor=2',
    'na%6De=R%C3%A9x',
    'a+b=c+d',
    'bad=%zz&x=%',
    'é=ü',
    'a=\uD800&\uDC00=b',
    'a=\uD83D\uDE00',
  ];
  // Every string of up to three characters from the ones that matter to the split.
  const alphabet = ['a', '=', '&', '%', '+', '1'];
  for (const x of alphabet) for (const y of ['', ...alphabet]) for (const z of ['', ...alphabet]) texts.push(x + y + z);
  for (const text of texts) {
    const parsed = parseQuery(text);
    assert.equal(Object.getPrototypeOf(parsed), null, text);
    assert.deepEqual({ ...parsed }, { ...reference(text) }, JSON.stringify(text));
  }
});
