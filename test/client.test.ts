import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import ts from 'typescript';
import { PetstoreClient, PetstoreError, type Pet } from '../clients/typescript/src/index.js';
import { generateSchema, SCHEMA_PATH } from '../clients/typescript/scripts/schema.js';
import { issueKey } from '../src/keys/issue.js';
import { StoreUnavailableError, type Store } from '../src/store/store.js';
import { startApp, tempSqliteStore } from './helpers.js';

const INT64_MAX = 2n ** 63n - 1n;
const INT64_MIN = -(2n ** 63n);
const CLIENT_DIR = new URL('../clients/typescript/', import.meta.url);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The service listening on a free loopback port, and a client for it. */
async function liveService(t: TestContext, { store }: { store?: Store } = {}) {
  const app = await startApp(t, { store });
  const address = await app.app.listen({ port: 0, host: '127.0.0.1' });
  const requests: Request[] = [];
  const recorded = async (request: Request) => {
    requests.push(request.clone());
    return fetch(request);
  };
  const client = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: app.key, fetch: recorded });
  return { ...app, address, client, requests };
}

async function rejection(promise: Promise<unknown>): Promise<PetstoreError> {
  const error = await promise.then(
    () => assert.fail('expected the call to fail'),
    (reason: unknown) => reason,
  );
  assert.ok(error instanceof PetstoreError, `not a PetstoreError: ${String(error)}`);
  return error;
}

test('createPet, listPets and getPet work against the live service, int64 exact as bigint', async (t) => {
  const { client } = await liveService(t);
  const big = await client.createPet({ name: 'Big', categoryId: INT64_MAX, status: 'pending' });
  const small = await client.createPet({ name: 'Small', categoryId: INT64_MIN });
  const edge = await client.createPet({ name: 'Edge', categoryId: 2n ** 53n + 1n });
  assert.equal(typeof big.id, 'bigint');
  assert.deepEqual(big, { id: big.id, name: 'Big', categoryId: INT64_MAX, status: 'pending' });
  assert.deepEqual(small, { id: small.id, name: 'Small', categoryId: INT64_MIN, status: 'available' });
  assert.equal(edge.categoryId, 9007199254740993n);
  assert.ok(small.id > big.id);

  const page = await client.listPets();
  assert.deepEqual(page, { pets: [big, small, edge] });
  assert.deepEqual(await client.getPet(edge.id), edge);
  assert.deepEqual((await client.listPets({ status: 'pending' })).pets, [big]);
});

test('listEvents reads the feed page by page with an events:read key, int64 exact in data', async (t) => {
  const { address, client, store } = await liveService(t);
  const big = await client.createPet({ name: 'Big', categoryId: INT64_MAX });
  await client.createPet({ name: 'Small', categoryId: INT64_MIN });
  await client.createPet({ name: 'Edge', categoryId: 2n ** 53n + 1n });
  // The test key holds the default scopes: the feed needs events:read.
  assert.equal((await rejection(client.listEvents())).status, 403);
  const { key } = await issueKey(store, 'reader', new Date(), { scopes: ['events:read'] });
  const reader = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key });
  // On PostgreSQL an event may be listed a moment after its 201 (docs/events.md#ordering).
  for (const deadline = Date.now() + 10_000; Date.now() < deadline;) {
    if ((await reader.listEvents()).events.length === 3) break;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  const first = await reader.listEvents({ limit: 2 });
  assert.equal(first.events.length, 2);
  assert.deepEqual(first.events[0]!.data, big);
  assert.equal(first.events[0]!.type, 'pet.created');
  assert.equal(first.next?.limit, 2);
  assert.equal(first.next?.after, first.events[1]!.id);
  const second = await reader.listEvents(first.next);
  assert.deepEqual(
    second.events.map((event) => event.data.categoryId),
    [2n ** 53n + 1n],
  );
  assert.equal(second.next, undefined);
  assert.deepEqual((await reader.listEvents({ after: second.events[0]!.id })).events, []);
});

test('listPets returns one page and the query of the next, from Link rel="next"', async (t) => {
  const { client, store } = await liveService(t);
  for (let i = 0; i < 5; i++) await store.createPet({ name: `P${i}`, categoryId: BigInt(i), status: 'sold' });
  const first = await client.listPets({ limit: 2, status: 'sold' });
  assert.deepEqual(
    first.pets.map((pet) => pet.name),
    ['P0', 'P1'],
  );
  assert.equal(first.next?.limit, 2);
  assert.equal(first.next?.status, 'sold');
  assert.equal(typeof first.next?.cursor, 'string');
  const second = await client.listPets({ ...first.next, limit: 10 });
  assert.deepEqual(
    second.pets.map((pet) => pet.name),
    ['P2', 'P3', 'P4'],
  );
  assert.equal(second.next, undefined);
});

test('pets() pages through 300 animals following rel="next": each once, in order, one request a page', async (t) => {
  const { client, store, requests } = await liveService(t);
  for (let i = 0; i < 300; i++) {
    await store.createPet({
      name: `Pet ${i}`,
      categoryId: INT64_MAX - BigInt(i),
      status: i % 3 ? 'available' : 'sold',
    });
  }
  const seen: Pet[] = [];
  for await (const pet of client.pets({ limit: 7 })) seen.push(pet);
  assert.equal(seen.length, 300);
  for (const [i, pet] of seen.entries()) {
    assert.equal(pet.name, `Pet ${i}`);
    assert.equal(pet.categoryId, INT64_MAX - BigInt(i));
    if (i > 0) assert.ok(pet.id > seen[i - 1]!.id);
  }
  assert.equal(requests.length, Math.ceil(300 / 7));
  assert.ok(requests.slice(1).every((request) => new URL(request.url).searchParams.has('cursor')));

  let sold = 0;
  for await (const pet of client.pets({ status: 'sold', limit: 100 })) {
    assert.equal(pet.status, 'sold');
    sold += 1;
  }
  assert.equal(sold, 100);
});

test('failures throw PetstoreError with the Error body code, message and status', async (t) => {
  const { client, address, store } = await liveService(t);
  const missing = await rejection(client.getPet(424242n));
  assert.deepEqual([missing.code, missing.status], ['not_found', 404]);
  assert.match(missing.message, /424242/);
  assert.ok(missing instanceof Error);

  const invalid = await rejection(client.createPet({ name: '', categoryId: 1n }));
  assert.deepEqual([invalid.code, invalid.status], ['invalid_request', 400]);
  assert.match(invalid.message, /name/);

  const stranger = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: 'psk_not_a_key' });
  const refused = await rejection(stranger.listPets());
  assert.deepEqual([refused.code, refused.status], ['unauthorized', 401]);

  const { key: readOnly } = await issueKey(store, 'dashboard', new Date(), { scopes: ['pets:read'] });
  const reader = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: readOnly });
  assert.deepEqual(await reader.listPets(), { pets: [] });
  const forbidden = await rejection(reader.createPet({ name: 'Rex', categoryId: 1n }, { retries: 3 }));
  assert.deepEqual([forbidden.code, forbidden.status], ['forbidden', 403]);
  assert.match(forbidden.message, /pets:write/);

  const nobody = new PetstoreClient({ baseUrl: 'http://127.0.0.1:1/v1', apiKey: 'psk_x' });
  const unreachable = await rejection(nobody.listPets());
  assert.deepEqual([unreachable.code, unreachable.status], ['network_error', 0]);
});

test('createPet with an idempotency key sent twice creates one animal', async (t) => {
  const { client, store } = await liveService(t);
  const first = await client.createPet({ name: 'Once', categoryId: 3n }, { idempotencyKey: 'order-17' });
  const again = await client.createPet({ name: 'Once', categoryId: 3n }, { idempotencyKey: 'order-17' });
  assert.deepEqual(again, first);
  assert.equal((await store.listPets({ limit: 10 })).length, 1);
  const mismatch = await rejection(client.createPet({ name: 'Other', categoryId: 3n }, { idempotencyKey: 'order-17' }));
  assert.deepEqual([mismatch.code, mismatch.status], ['idempotency_mismatch', 422]);
});

test('createPet with retries repeats a request whose answer was lost, with the same generated key', async (t) => {
  const { address, key, store } = await liveService(t);
  const sent: Request[] = [];
  const loseFirstAnswer = async (request: Request) => {
    sent.push(request.clone());
    const response = await fetch(request);
    if (sent.length === 1) throw new TypeError('fetch failed: socket hang up');
    return response;
  };
  const client = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key, fetch: loseFirstAnswer });
  const pet = await client.createPet({ name: 'Lost', categoryId: 5n }, { retries: 2 });
  assert.equal(sent.length, 2);
  const keys = sent.map((request) => request.headers.get('idempotency-key'));
  assert.match(String(keys[0]), UUID);
  assert.equal(keys[1], keys[0]);
  assert.deepEqual(await store.listPets({ limit: 10 }), [pet]);
});

test('createPet with retries gets past a 503 from the service', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  let failures = 1;
  const store: Store = {
    ...real,
    createPetOnce: (...args) =>
      failures-- > 0 ? Promise.reject(new StoreUnavailableError(new Error('down'))) : real.createPetOnce(...args),
  };
  const { client, requests } = await liveService(t, { store });
  const pet = await client.createPet({ name: 'Patient', categoryId: 6n }, { retries: 3 });
  assert.equal(pet.name, 'Patient');
  assert.equal(requests.length, 2);
  assert.deepEqual(await real.listPets({ limit: 10 }), [pet]);
});

test('createPet with retries waits out a 409 while the first attempt is in flight, then gets its answer', async (t) => {
  const { store: real } = await tempSqliteStore(t);
  let release!: () => void;
  const held = new Promise<void>((resolve) => (release = resolve));
  const store: Store = {
    ...real,
    createPetOnce: async (...args) => (await held, real.createPetOnce(...args)),
  };
  const { address, key } = await liveService(t, { store });
  const statuses: number[] = [];
  const watch = async (request: Request) => {
    const response = await fetch(request);
    statuses.push(response.status);
    if (response.status === 409) release();
    return response;
  };
  const first = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key });
  const second = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key, fetch: watch, maxRetryDelayMs: 20 });
  const body = { name: 'Twice', categoryId: 8n };
  const slow = first.createPet(body, { idempotencyKey: 'k-409' });
  await new Promise((resolve) => setTimeout(resolve, 50));
  const retried = await second.createPet(body, { idempotencyKey: 'k-409', retries: 5 });
  assert.equal(statuses[0], 409);
  assert.equal(statuses.at(-1), 201);
  assert.deepEqual(retried, await slow);
  assert.equal((await real.listPets({ limit: 10 })).length, 1);
});

test('createPet without retries sends once, with no idempotency key', async (t) => {
  const { address, key } = await liveService(t);
  const sent: Request[] = [];
  const failing = async (request: Request) => {
    sent.push(request);
    throw new TypeError('fetch failed');
  };
  const client = new PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key, fetch: failing });
  const error = await rejection(client.createPet({ name: 'Nope', categoryId: 1n }));
  assert.equal(error.code, 'network_error');
  assert.equal(sent.length, 1);
  assert.equal(sent[0]!.headers.get('idempotency-key'), null);
});

test('the committed generated types are what the served document generates, and drift is caught', async (t) => {
  const { address } = await liveService(t);
  const document = (await (await fetch(`${address}/v1/openapi.json`)).json()) as {
    components: { schemas: { Pet: { properties: Record<string, object> } } };
  };
  const committed = readFileSync(SCHEMA_PATH, 'utf8');
  assert.equal(
    await generateSchema(document),
    committed,
    'clients/typescript/src/schema.ts is stale: start the service and run `npm run generate` in clients/typescript',
  );
  document.components.schemas.Pet.properties.weight = { type: 'integer', format: 'int64' };
  const drifted = await generateSchema(document);
  assert.notEqual(drifted, committed);
  assert.match(drifted, /weight\?: bigint/);
});

test('the client package builds; its declarations mark getPet @deprecated and type int64 as bigint', async (t) => {
  const outDir = new URL('dist-test/', CLIENT_DIR).pathname;
  t.after(() => rmSync(outDir, { recursive: true, force: true }));
  const tsc = new URL('../node_modules/typescript/bin/tsc', import.meta.url).pathname;
  await promisify(execFile)(process.execPath, [
    tsc,
    '-p',
    new URL('tsconfig.json', CLIENT_DIR).pathname,
    '--outDir',
    outDir,
  ]);
  const declarations = `${outDir}client.d.ts`;
  const source = ts.createSourceFile(declarations, readFileSync(declarations, 'utf8'), ts.ScriptTarget.Latest, true);
  const methods = new Map<string, ts.MethodDeclaration>();
  source.forEachChild((node) => {
    if (ts.isClassDeclaration(node) && node.name?.text === 'PetstoreClient') {
      for (const member of node.members) {
        if (ts.isMethodDeclaration(member)) methods.set(member.name.getText(source), member);
      }
    }
  });
  assert.deepEqual([...methods.keys()].sort(), ['createPet', 'getPet', 'listEvents', 'listPets', 'pets']);
  for (const [name, method] of methods) {
    assert.equal(ts.getJSDocDeprecatedTag(method) !== undefined, name === 'getPet', name);
  }
  assert.match(methods.get('getPet')!.getText(source), /getPet\(petId: bigint\)/);

  // The built package, as an installer gets it, calls the live service.
  const built = (await import(`${outDir}index.js`)) as typeof import('../clients/typescript/src/index.js');
  const { address, key } = await liveService(t);
  const fromBuild = new built.PetstoreClient({ baseUrl: `${address}/v1`, apiKey: key });
  const pet = await fromBuild.createPet({ name: 'Built', categoryId: INT64_MAX });
  assert.equal(pet.categoryId, INT64_MAX);
  const refused = await new built.PetstoreClient({ baseUrl: `${address}/v1`, apiKey: 'psk_x' })
    .listPets()
    .catch((e) => e);
  assert.ok(refused instanceof built.PetstoreError);
  assert.equal(refused.code, 'unauthorized');
});
