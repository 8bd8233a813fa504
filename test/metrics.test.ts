import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import type { Store } from '../src/store/store.js';
import { addPet, assertError, startApp, storeFailingLists, tempSqliteStore, type TestApp } from './helpers.js';

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(,|$)/y;
// Prometheus reads values with Go's ParseFloat, which takes NaN and Inf in any case.
const VALUE = /^(?:[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|nan|[-+]inf)$/i;
const SUFFIXES = ['_bucket', '_sum', '_count', '_total', ''];

/**
 * Parses the Prometheus text exposition format 0.0.4 strictly: every line is a HELP, a TYPE, or
 * a sample of a family declared by an earlier TYPE; anything else fails the test.
 */
function parseExposition(text: string): { samples: Sample[]; types: Map<string, string> } {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  assert.ok(text.endsWith('\n'), 'the exposition ends with a line feed');
  for (const line of text.slice(0, -1).split('\n')) {
    if (line === '') continue;
    if (line.startsWith('# HELP ')) {
      assert.match(line.split(' ')[2]!, NAME);
      continue;
    }
    if (line.startsWith('# TYPE ')) {
      const [, , name, type] = line.split(' ');
      assert.match(name!, NAME);
      assert.ok(['counter', 'gauge', 'histogram', 'summary', 'untyped'].includes(type!), line);
      assert.ok(!types.has(name!), `${name} declared twice`);
      types.set(name!, type!);
      continue;
    }
    const match = SAMPLE.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const [, name, labelText = '', value] = match;
    assert.match(value!, VALUE, line);
    const family = SUFFIXES.map((suffix) => name!.slice(0, name!.length - suffix.length)).find(
      (base, i) => name!.endsWith(SUFFIXES[i]!) && types.has(base),
    );
    assert.ok(family, `sample of an undeclared family: ${line}`);
    const labels: Record<string, string> = {};
    LABEL.lastIndex = 0;
    while (LABEL.lastIndex < labelText.length) {
      const label = LABEL.exec(labelText);
      assert.ok(label, `malformed labels: ${line}`);
      labels[label[1]!] = label[2]!;
    }
    samples.push({ name: name!, labels, value: Number(value!.replace(/inf$/i, 'Infinity')) });
  }
  return { samples, types };
}

async function scrape({ call }: Pick<TestApp, 'call'>) {
  const response = await call({ method: 'GET', url: '/metrics' });
  assert.equal(response.statusCode, 200, response.body);
  assert.equal(response.headers['content-type'], 'text/plain; version=0.0.4; charset=utf-8');
  return parseExposition(response.body);
}

function valueOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const found = samples.filter(
    (s) => s.name === name && Object.entries(labels).every(([key, value]) => s.labels[key] === value),
  );
  assert.ok(found.length <= 1, `${name} ${JSON.stringify(labels)} matches ${found.length} samples`);
  return found[0]?.value;
}

test('GET /metrics needs an API key: 401 with the Error body and a Bearer challenge', async (t) => {
  const { app } = await startApp(t);
  for (const headers of [{}, { authorization: 'Bearer psk_not_a_key' }]) {
    const response = await app.inject({ method: 'GET', url: '/metrics', headers });
    assertError(response, 401, 'unauthorized');
    assert.match(String(response.headers['www-authenticate']), /^Bearer realm="petstore"/);
    assert.doesNotMatch(response.body, /petstore_http/);
  }
  // HEAD needs the key like GET (docs/api.md#operations), and tells nothing without one.
  const head = await app.inject({ method: 'HEAD', url: '/metrics' });
  assert.equal(head.statusCode, 401);
  assert.equal(head.body, '');
  assert.match(String(head.headers['www-authenticate']), /^Bearer realm="petstore"/);
});

test('GET /metrics is outside the OpenAPI document and answers 405 to other methods', async (t) => {
  const { app, call } = await startApp(t);
  const document = (await app.inject({ method: 'GET', url: '/v1/openapi.json' })).json();
  assert.deepEqual(Object.keys(document.paths).sort(), ['/events', '/pets', '/pets/{petId}']);
  const post = await call({ method: 'POST', url: '/metrics' });
  assertError(post, 405, 'method_not_allowed');
  assert.equal(post.headers.allow, 'GET, HEAD');
});

test('the exposition is valid text format with every documented family and process metrics', async (t) => {
  const app = await startApp(t);
  const { types, samples } = await scrape(app);
  assert.equal(types.get('petstore_http_requests_total'), 'counter');
  assert.equal(types.get('petstore_http_request_duration_seconds'), 'histogram');
  assert.equal(types.get('petstore_http_requests_in_flight'), 'gauge');
  assert.equal(types.get('petstore_store_duration_seconds'), 'histogram');
  assert.equal(types.get('petstore_pets'), 'gauge');
  assert.equal(types.get('process_cpu_seconds_total'), 'counter');
  assert.equal(types.get('process_resident_memory_bytes'), 'gauge');
  assert.equal(types.get('nodejs_eventloop_lag_seconds'), 'gauge');
  assert.equal(types.get('nodejs_heap_size_used_bytes'), 'gauge');
  assert.equal(types.get('nodejs_heap_space_size_used_bytes'), 'gauge');
  assert.equal(types.get('nodejs_version_info'), 'gauge');
  assert.ok(valueOf(samples, 'process_resident_memory_bytes')! > 0);
  assert.equal(types.get('nodejs_gc_duration_seconds'), 'histogram');
});

test('docs/operations.md lists every petstore_ metric the service exposes', async (t) => {
  const readme = readFileSync(new URL('../docs/operations.md', import.meta.url), 'utf8');
  const { types } = await scrape(await startApp(t));
  const ours = [...types.keys()].filter((name) => name.startsWith('petstore_'));
  assert.ok(ours.includes('petstore_http_requests_total'), ours.join(', '));
  for (const name of ours)
    assert.ok(readme.includes(`| \`${name}\``), `${name} has a row in the metrics table of docs/operations.md`);
});

test('counts and times requests by operation, method and status', async (t) => {
  const app = await startApp(t);
  for (let i = 0; i < 3; i++) assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
  const pet = await addPet(app);
  await app.call({ method: 'GET', url: `/v1/pets/${pet.id + 1}` });
  await app.call({ method: 'GET', url: '/no/such/path/1234' });
  await app.call({ method: 'POST', url: '/v1/pets', payload: { name: 'Rex' } });
  await app.app.inject({ method: 'GET', url: '/v1/pets' });

  const { samples } = await scrape(app);
  const requests = (operation: string, method: string, status: string) =>
    valueOf(samples, 'petstore_http_requests_total', { operation, method, status });
  assert.equal(requests('listPets', 'GET', '200'), 3);
  assert.equal(requests('listPets', 'GET', '401'), 1);
  assert.equal(requests('createPet', 'POST', '201'), 1);
  assert.equal(requests('createPet', 'POST', '400'), 1);
  assert.equal(requests('getPet', 'GET', '404'), 1);
  assert.equal(requests('unmatched', 'GET', '404'), 1);
  assert.ok(!samples.some((s) => s.labels.operation?.includes('1234')), 'a path never becomes a label value');

  const labels = { operation: 'listPets', method: 'GET', status: '200' };
  assert.equal(valueOf(samples, 'petstore_http_request_duration_seconds_count', labels), 3);
  const sum = valueOf(samples, 'petstore_http_request_duration_seconds_sum', labels)!;
  assert.ok(sum > 0 && sum < 30, `sum ${sum}`);
  const buckets = samples.filter(
    (s) => s.name === 'petstore_http_request_duration_seconds_bucket' && s.labels.operation === 'listPets',
  );
  const listed = buckets.filter((s) => s.labels.status === '200');
  assert.ok(listed.length > 5);
  for (let i = 1; i < listed.length; i++) assert.ok(listed[i]!.value >= listed[i - 1]!.value, 'buckets are cumulative');
  assert.equal(listed.at(-1)!.labels.le, '+Inf');
  assert.equal(listed.at(-1)!.value, 3);
});

test('requests the router refuses (malformed percent-encoding) are counted and timed too', async (t) => {
  const app = await startApp(t);
  for (const url of ['/v1/pets/%E0%A4%A', '/v1/pe%zz'])
    assert.equal((await app.call({ method: 'GET', url })).statusCode, 404);
  const { samples } = await scrape(app);
  const labels = { operation: 'unmatched', method: 'GET', status: '404' };
  assert.equal(valueOf(samples, 'petstore_http_requests_total', labels), 2);
  assert.equal(valueOf(samples, 'petstore_http_request_duration_seconds_count', labels), 2);
  const sum = valueOf(samples, 'petstore_http_request_duration_seconds_sum', labels)!;
  assert.ok(Number.isFinite(sum) && sum >= 0 && sum < 30, `sum ${sum}`);
});

// After creates at most 5 s old on PostgreSQL: test/metrics-cost.test.ts moves the store's clock.
test('petstore_pets counts animals by status', async (t) => {
  const empty = (await scrape(await startApp(t))).samples;
  for (const status of ['available', 'pending', 'sold']) assert.equal(valueOf(empty, 'petstore_pets', { status }), 0);
  const app = await startApp(t);
  for (const status of ['sold', 'available', 'sold']) await addPet(app, { name: 'Rex', categoryId: 1, status });
  const { samples } = await scrape(app);
  assert.equal(valueOf(samples, 'petstore_pets', { status: 'available' }), 1);
  assert.equal(valueOf(samples, 'petstore_pets', { status: 'pending' }), 0);
  assert.equal(valueOf(samples, 'petstore_pets', { status: 'sold' }), 2);
});

test('a scrape while the database is down still answers, without petstore_pets', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  let down = false;
  const store: Store = {
    ...real,
    countPetsByStatus: () => (down ? Promise.reject(new Error('database gone')) : real.countPetsByStatus()),
  };
  const app = await startApp(t, { store });
  assert.equal(valueOf((await scrape(app)).samples, 'petstore_pets', { status: 'sold' }), 0);
  down = true;
  const { samples, types } = await scrape(app);
  assert.equal(types.get('petstore_pets'), 'gauge');
  assert.equal(valueOf(samples, 'petstore_pets', { status: 'sold' }), undefined);
  assert.ok(valueOf(samples, 'process_resident_memory_bytes')! > 0);
  down = false;
  assert.equal(valueOf((await scrape(app)).samples, 'petstore_pets', { status: 'sold' }), 0);
});

test('petstore_store_duration_seconds times each Store method, failures apart', async (t) => {
  const { store, failing } = await storeFailingLists(t);
  const app = await startApp(t, { store });
  await addPet(app);
  await addPet(app);
  await app.call({ method: 'GET', url: '/v1/pets' });
  failing.on = true;
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 500);
  const { samples } = await scrape(app);
  assert.equal(valueOf(samples, 'petstore_store_duration_seconds_count', { method: 'createPet', outcome: 'ok' }), 2);
  assert.equal(valueOf(samples, 'petstore_store_duration_seconds_count', { method: 'listPets', outcome: 'ok' }), 1);
  assert.equal(valueOf(samples, 'petstore_store_duration_seconds_count', { method: 'listPets', outcome: 'error' }), 1);
  assert.ok(
    valueOf(samples, 'petstore_store_duration_seconds_count', { method: 'findActiveKey', outcome: 'ok' })! >= 1,
  );
});

test('a Store whose methods are inherited (a class) is timed as well', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  const app = await startApp(t, { store: Object.create(real) as Store });
  assert.equal((await app.call({ method: 'GET', url: '/v1/pets' })).statusCode, 200);
  const { samples } = await scrape(app);
  assert.equal(valueOf(samples, 'petstore_store_duration_seconds_count', { method: 'listPets', outcome: 'ok' }), 1);
});

test('petstore_http_requests_in_flight counts requests not yet answered', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const store: Store = { ...real, listPets: async (query) => (await held, real.listPets(query)) };
  const app = await startApp(t, { store });
  const slow = [app.call({ method: 'GET', url: '/v1/pets' }), app.call({ method: 'GET', url: '/v1/pets' })];
  await new Promise((resolve) => setTimeout(resolve, 50));
  // The scrape itself is in flight while it is answered.
  assert.equal(valueOf((await scrape(app)).samples, 'petstore_http_requests_in_flight'), 3);
  release();
  for (const response of await Promise.all(slow)) assert.equal(response.statusCode, 200);
  assert.equal(valueOf((await scrape(app)).samples, 'petstore_http_requests_in_flight'), 1);
});

test('two apps in one process keep their own metrics', async (t) => {
  const a = await startApp(t);
  const b = await startApp(t);
  await a.call({ method: 'GET', url: '/v1/pets' });
  await a.call({ method: 'GET', url: '/v1/pets' });
  await b.call({ method: 'GET', url: '/v1/pets' });
  const labels = { operation: 'listPets', method: 'GET', status: '200' };
  assert.equal(valueOf((await scrape(a)).samples, 'petstore_http_requests_total', labels), 2);
  assert.equal(valueOf((await scrape(b)).samples, 'petstore_http_requests_total', labels), 1);
});

test('scrapes over a real socket parse and add up while 300 requests run', async (t) => {
  const app = await startApp(t);
  const base = await app.app.listen({ port: 0, host: '127.0.0.1' });
  const headers = { authorization: `Bearer ${app.key}` };
  const scrapeLive = async () => {
    const response = await fetch(`${base}/metrics`, { headers });
    assert.equal(response.status, 200);
    return parseExposition(await response.text()).samples;
  };
  const send = (i: number) =>
    i % 3 === 0
      ? fetch(`${base}/v1/pets`, {
          method: 'POST',
          headers: { ...headers, 'content-type': 'application/json' },
          body: `{"name":"Rex ${i}","categoryId":${i}}`,
        })
      : fetch(`${base}/v1/pets?limit=5`, { headers });
  let next = 0;
  const statuses: number[] = [];
  // 20 clients at once, each sending its next request as soon as the last is answered.
  const clients = Array.from({ length: 20 }, async () => {
    while (next < 300) {
      const response = await send(next++);
      statuses.push(response.status);
      await response.arrayBuffer();
    }
  });
  const during = await Promise.all([scrapeLive(), scrapeLive(), scrapeLive()]);
  await Promise.all(clients);
  assert.equal(statuses.length, 300);
  assert.ok(
    statuses.every((status) => status === 200 || status === 201),
    String(statuses),
  );
  const after = await scrapeLive();
  const count = (samples: Sample[], operation: string, status: string) =>
    valueOf(samples, 'petstore_http_requests_total', {
      operation,
      method: operation === 'createPet' ? 'POST' : 'GET',
      status,
    }) ?? 0;
  for (const samples of during) assert.ok(count(samples, 'listPets', '200') <= 200);
  assert.equal(count(after, 'listPets', '200'), 200);
  assert.equal(count(after, 'createPet', '201'), 100);
  // PostgreSQL's count was cached by the scrapes above, up to 5 s (test/metrics-cost.test.ts).
  const pets = valueOf(after, 'petstore_pets', { status: 'available' })!;
  if (process.env.PETSTORE_TEST_STORE === 'postgres') assert.ok(pets >= 0 && pets <= 100, String(pets));
  else assert.equal(pets, 100);
  assert.equal(
    valueOf(after, 'petstore_http_requests_total', { operation: '/metrics', method: 'GET', status: '200' }),
    3,
  );
});
