import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { PetStatus } from '../src/schemas.js';
import { assertError, startApp, type TestApp } from './helpers.js';

// The target may be relative or absolute (at the configured base address); only its path and query matter.
const NEXT = /^<((?:https?:\/\/[^/>]+)?(?:\/[^/>?]+)*\/v1\/pets\?[^>]*)>; rel="next"$/;

/** Adds animals straight through the store, which is quicker than HTTP for bulk set-up. */
async function seed({ store }: TestApp, statuses: PetStatus[]): Promise<bigint[]> {
  const ids = [];
  for (const [i, status] of statuses.entries()) {
    ids.push((await store.createPet({ name: `Pet ${i}`, categoryId: BigInt(i), status })).id);
  }
  return ids;
}

const ids = (body: string) => (JSON.parse(body) as { id: number }[]).map((pet) => pet.id);

/** The URL of the rel="next" link, or undefined when there is none. */
function nextLink(response: { headers: Record<string, unknown> }): string | undefined {
  const link = response.headers.link;
  if (link === undefined) return undefined;
  const match = NEXT.exec(String(link));
  assert.ok(match, `not a rel="next" link: ${String(link)}`);
  const url = new URL(match[1]!, 'http://127.0.0.1');
  assert.ok(url.searchParams.get('cursor'), `no cursor in ${match[1]}`);
  return `/v1/pets${url.search}`;
}

/** Follows rel="next" from `url` to the last page, calling `between` before each next page. */
async function walk(app: TestApp, url: string, between: (next: string) => Promise<string> | string = (n) => n) {
  const seen: number[] = [];
  const pages: number[][] = [];
  let current: string | undefined = url;
  while (current !== undefined) {
    const response = await app.call({ method: 'GET', url: current });
    assert.equal(response.statusCode, 200, `${current}: ${response.body}`);
    const page = ids(response.body);
    pages.push(page);
    seen.push(...page);
    const next = nextLink(response);
    current = next === undefined ? undefined : await between(next);
    assert.ok(pages.length < 1000, 'paging does not end');
  }
  return { seen, pages };
}

test('returns an empty array and no Link when there are no animals', async (t) => {
  const app = await startApp(t);
  const response = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(response.statusCode, 200);
  assert.match(String(response.headers['content-type']), /^application\/json(;|$)/);
  assert.equal(response.body, '[]');
  assert.equal(response.headers.link, undefined);
});

test('returns every field of each animal in ascending id order', async (t) => {
  const app = await startApp(t);
  await seed(app, ['sold', 'available', 'pending']);
  const response = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(
    response.body,
    '[{"id":1,"name":"Pet 0","categoryId":0,"status":"sold"},' +
      '{"id":2,"name":"Pet 1","categoryId":1,"status":"available"},' +
      '{"id":3,"name":"Pet 2","categoryId":2,"status":"pending"}]',
  );
});

test('returns 20 animals by default, with a next link only when more match', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(20).fill('available'));
  const twenty = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.deepEqual(
    ids(twenty.body),
    Array.from({ length: 20 }, (_, i) => i + 1),
  );
  assert.equal(twenty.headers.link, undefined);

  await seed(app, ['available']);
  const first = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.deepEqual(
    ids(first.body),
    Array.from({ length: 20 }, (_, i) => i + 1),
  );
  const next = nextLink(first);
  assert.ok(next);
  const last = await app.call({ method: 'GET', url: next });
  assert.deepEqual(ids(last.body), [21]);
  assert.equal(last.headers.link, undefined);
});

test('honours limit from 1 to 100', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(101).fill('pending'));
  for (const limit of [1, 2, 7, 99, 100]) {
    const response = await app.call({ method: 'GET', url: `/v1/pets?limit=${limit}` });
    assert.equal(response.statusCode, 200);
    assert.deepEqual(
      ids(response.body),
      Array.from({ length: limit }, (_, i) => i + 1),
    );
    assert.ok(nextLink(response), `limit=${limit} has a next link`);
  }
  const all = await app.call({ method: 'GET', url: '/v1/pets?limit=100' });
  const rest = await app.call({ method: 'GET', url: nextLink(all)! });
  assert.deepEqual(ids(rest.body), [101]);
  assert.equal(rest.headers.link, undefined);
});

test('has no next link when the page ends exactly at the last animal', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(6).fill('sold'));
  const first = await app.call({ method: 'GET', url: '/v1/pets?limit=3' });
  const second = await app.call({ method: 'GET', url: nextLink(first)! });
  assert.deepEqual(ids(second.body), [4, 5, 6]);
  assert.equal(second.headers.link, undefined);
  const whole = await app.call({ method: 'GET', url: '/v1/pets?limit=6' });
  assert.equal(whole.headers.link, undefined);
});

test('returns 400 naming limit for every invalid limit', async (t) => {
  const app = await startApp(t);
  await seed(app, ['available']);
  const invalid = [
    '0',
    '101',
    'abc',
    '1.5',
    '5.0',
    '1e1',
    '%2B5',
    '+5',
    '05',
    '00',
    '',
    '-1',
    '-0',
    '%205',
    '5%20',
    '0x5',
    '１',
    '1000',
    '99999999999999999999999',
    'null',
    'true',
  ];
  for (const limit of invalid) {
    const response = await app.call({ method: 'GET', url: `/v1/pets?limit=${limit}` });
    try {
      assertError(response, 400, 'invalid_request', 'limit');
    } catch (error) {
      throw new Error(`limit=${limit}: ${(error as Error).message}`, { cause: error });
    }
  }
  assertError(await app.call({ method: 'GET', url: '/v1/pets?limit' }), 400, 'invalid_request', 'limit');
});

test('returns 400 naming status for a status that is not a PetStatus', async (t) => {
  const app = await startApp(t);
  for (const status of ['lost', 'AVAILABLE', 'Available', '', 'available%20', 'sold,pending']) {
    const response = await app.call({ method: 'GET', url: `/v1/pets?status=${status}` });
    assertError(response, 400, 'invalid_request', 'status');
  }
});

test('filters by status, keeping ascending id order', async (t) => {
  const app = await startApp(t);
  await seed(app, ['available', 'pending', 'sold', 'pending', 'available', 'pending']);
  const expected = { available: [1, 5], pending: [2, 4, 6], sold: [3] };
  for (const [status, wanted] of Object.entries(expected)) {
    const response = await app.call({ method: 'GET', url: `/v1/pets?status=${status}` });
    assert.equal(response.statusCode, 200);
    const pets = JSON.parse(response.body) as { id: number; status: string }[];
    assert.deepEqual(
      pets.map((pet) => pet.id),
      wanted,
    );
    assert.ok(pets.every((pet) => pet.status === status));
  }
});

test('returns 400 naming the parameter when one is repeated', async (t) => {
  const app = await startApp(t);
  const first = await seedAndFirstPage(app);
  const cursor = new URLSearchParams(first.split('?')[1]).get('cursor')!;
  for (const [query, name] of [
    ['limit=5&limit=5', 'limit'],
    ['limit=5&limit=6', 'limit'],
    ['status=sold&status=sold', 'status'],
    ['status=sold&limit=2&status=pending', 'status'],
    [`cursor=${cursor}&cursor=${cursor}`, 'cursor'],
  ]) {
    assertError(await app.call({ method: 'GET', url: `/v1/pets?${query}` }), 400, 'invalid_request', name!);
  }
});

test('returns 400 naming an unknown parameter', async (t) => {
  const app = await startApp(t);
  for (const [query, name] of [
    ['limt=5', 'limt'],
    ['Limit=5', 'Limit'],
    ['limit=5&page=2', 'page'],
    ['offset=0', 'offset'],
    ['status=sold&STATUS=sold', 'STATUS'],
    ['foo', 'foo'],
    ['__proto__=1', '__proto__'],
    ['__proto__[limit]=1', '__proto__'],
    ['constructor=1', 'constructor'],
    ['toString=1', 'toString'],
  ]) {
    assertError(await app.call({ method: 'GET', url: `/v1/pets?${query}` }), 400, 'invalid_request', name!);
  }
});

async function seedAndFirstPage(app: TestApp): Promise<string> {
  await seed(app, ['available', 'available', 'available']);
  return nextLink(await app.call({ method: 'GET', url: '/v1/pets?limit=1' }))!;
}

test('following next links visits every animal once, in order, and keeps the body a plain array', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(23).fill('available'));
  const { seen, pages } = await walk(app, '/v1/pets?limit=5');
  assert.deepEqual(
    seen,
    Array.from({ length: 23 }, (_, i) => i + 1),
  );
  assert.deepEqual(
    pages.map((page) => page.length),
    [5, 5, 5, 5, 3],
  );
});

test('following next links with a status filter visits every matching animal once, in order', async (t) => {
  const app = await startApp(t);
  const statuses: PetStatus[] = Array.from(
    { length: 30 },
    (_, i) => (['available', 'pending', 'sold'] as const)[i % 3]!,
  );
  const created = await seed(app, statuses);
  for (const status of ['available', 'pending', 'sold'] as const) {
    const wanted = created.filter((_, i) => statuses[i] === status).map(Number);
    const { seen } = await walk(app, `/v1/pets?status=${status}&limit=3`, (next) => {
      assert.match(next, new RegExp(`[?&]status=${status}(&|$)`));
      return next;
    });
    assert.deepEqual(seen, wanted);
  }
});

test('following next links visits every animal once while new ones are added between pages', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(10).fill('available'));
  let added = 0;
  const { seen } = await walk(app, '/v1/pets?limit=3', async (next) => {
    if (added < 12) {
      await seed(app, ['available', 'pending']);
      added += 2;
    }
    return next;
  });
  for (let id = 1; id <= 10; id++) assert.equal(seen.filter((s) => s === id).length, 1, `id ${id}`);
  assert.equal(new Set(seen).size, seen.length, 'no animal twice');
  assert.deepEqual(
    seen,
    [...seen].sort((a, b) => a - b),
  );
});

test('following next links with a status filter while animals are added visits each match once', async (t) => {
  const app = await startApp(t);
  const statuses: PetStatus[] = ['sold', 'pending', 'sold', 'sold', 'available', 'sold', 'sold'];
  const created = await seed(app, statuses);
  const { seen } = await walk(app, '/v1/pets?status=sold&limit=2', async (next) => {
    await seed(app, ['sold', 'available']);
    return next;
  });
  const soldAtStart = created.filter((_, i) => statuses[i] === 'sold').map(Number);
  assert.deepEqual(soldAtStart, [1, 3, 4, 6, 7]);
  for (const id of soldAtStart) assert.equal(seen.filter((s) => s === id).length, 1, `id ${id}`);
  assert.equal(new Set(seen).size, seen.length);
  assert.deepEqual(
    seen,
    [...seen].sort((a, b) => a - b),
  );
});

test('following next links visits every animal once when limit changes from page to page', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(40).fill('pending'));
  const limits = [7, 1, 100, 2];
  let turn = 0;
  const { seen, pages } = await walk(app, '/v1/pets?limit=3', (next) => {
    const url = new URL(next, 'http://x');
    url.searchParams.set('limit', String(limits[turn++ % limits.length]));
    return url.pathname + url.search;
  });
  assert.deepEqual(
    seen,
    Array.from({ length: 40 }, (_, i) => i + 1),
  );
  assert.deepEqual(
    pages.map((page) => page.length),
    [3, 7, 1, 29],
  );
});

test('a next link works without its limit, falling back to the default', async (t) => {
  const app = await startApp(t);
  await seed(app, Array<PetStatus>(30).fill('sold'));
  const first = await app.call({ method: 'GET', url: '/v1/pets?limit=2' });
  const url = new URL(nextLink(first)!, 'http://x');
  url.searchParams.delete('limit');
  const second = await app.call({ method: 'GET', url: url.pathname + url.search });
  assert.deepEqual(
    ids(second.body),
    Array.from({ length: 20 }, (_, i) => i + 3),
  );
});

test('returns 400 naming cursor for a cursor the service could not have issued', async (t) => {
  const app = await startApp(t);
  await seed(app, ['available', 'available', 'available']);
  const next = nextLink(await app.call({ method: 'GET', url: '/v1/pets?limit=1' }))!;
  const issued = new URLSearchParams(next.split('?')[1]).get('cursor')!;
  const b64 = (text: string) => Buffer.from(text).toString('base64url');
  const forged = [
    '',
    'abc',
    '!!!!',
    '%00',
    'garbage-garbage-garbage',
    issued + 'A',
    issued + '=',
    issued.slice(0, -1),
    `${issued}${issued}`,
    Buffer.from(':1').toString('base64'),
    b64(':0'),
    b64(':-1'),
    b64(':01'),
    b64('1'),
    b64('lost:1'),
    b64('AVAILABLE:1'),
    b64(':1:2'),
    b64(': 1'),
    b64(':1.5'),
    b64(':99999999999999999999'),
    b64(':9223372036854775808'),
    b64(':9999999999999999999'),
    b64('{"afterId":1}'),
  ];
  for (const cursor of forged) {
    const response = await app.call({ method: 'GET', url: `/v1/pets?cursor=${encodeURIComponent(cursor)}` });
    try {
      assertError(response, 400, 'invalid_request', 'cursor');
    } catch (error) {
      throw new Error(`cursor=${cursor}: ${(error as Error).message}`, { cause: error });
    }
  }
});

test('returns 400 naming cursor when it is used with a different status than it was issued for', async (t) => {
  const app = await startApp(t);
  await seed(app, ['pending', 'pending', 'pending', 'sold', 'sold', 'available']);
  const cursorOf = async (query: string) => {
    const next = nextLink(await app.call({ method: 'GET', url: `/v1/pets?${query}` }))!;
    return new URLSearchParams(next.split('?')[1]).get('cursor')!;
  };
  const pending = await cursorOf('status=pending&limit=1');
  const unfiltered = await cursorOf('limit=1');
  for (const query of [
    `cursor=${pending}`,
    `cursor=${pending}&status=sold`,
    `cursor=${pending}&status=available`,
    `cursor=${unfiltered}&status=pending`,
    `cursor=${unfiltered}&status=available`,
  ]) {
    assertError(await app.call({ method: 'GET', url: `/v1/pets?${query}` }), 400, 'invalid_request', 'cursor');
  }
  const same = await app.call({ method: 'GET', url: `/v1/pets?cursor=${pending}&status=pending` });
  assert.deepEqual(ids(same.body), [2, 3]);
});

test('the next link is one RFC 8288 link to listPets whose cursor is URL-safe', async (t) => {
  const app = await startApp(t);
  await seed(app, ['available', 'available']);
  const response = await app.call({ method: 'GET', url: '/v1/pets?limit=1' });
  const link = String(response.headers.link).replace(/^<[^/>]*:\/\/[^/>]+/, '<');
  assert.match(
    link,
    /^<\/v1\/pets\?(?:[a-z]+=[A-Za-z0-9_-]+&)*cursor=[A-Za-z0-9_-]+(?:&[a-z]+=[A-Za-z0-9_-]+)*>; rel="next"$/,
  );
  assert.ok(Array.isArray(JSON.parse(response.body)));
});

test('listPets carries no deprecation headers', async (t) => {
  const app = await startApp(t);
  await seed(app, ['available']);
  const response = await app.call({ method: 'GET', url: '/v1/pets' });
  assert.equal(response.headers.deprecation, undefined);
  assert.equal(response.headers.sunset, undefined);
  assert.equal(response.headers.link, undefined);
});
