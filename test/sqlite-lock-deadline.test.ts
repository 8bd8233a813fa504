import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { setTimeout as sleep } from 'node:timers/promises';
import { randomBytes } from 'node:crypto';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { retrying } from '../src/store/group-commit.js';
import { StoreUnavailableError } from '../src/store/store.js';
import { tempSqliteStore } from './helpers.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, startServer } from './process.js';

// docs/api.md#limits: a lock another process holds on the SQLite file never stops the service
// answering; `/healthz` keeps answering promptly and a request that cannot get the lock gets 503
// within PETSTORE_DB_TIMEOUT_MS, not a multiple of it. The service runs as deployed (dist); this
// test process holds the lock through its own connection to the file and probes `/healthz`,
// while a client process of its own sends the waiting requests, so that their work does not
// delay the probes.

const TIMEOUT_MS = 2000;
const WAITING = 100;
// "Promptly": a quarter of the timeout. A thread blocked by the waiting creates holds a probe for
// about the timeout or longer, while one that blocks for a few milliseconds per try stays far below.
const PROMPT_MS = TIMEOUT_MS / 4;
// What a 503 may take past the timeout as the service times it (its log line's durationMs, from
// receiving the request): the last try at the deadline and the answers sent with it. The client,
// which also counts its own turns on a machine busy with other tests, must see it before twice the
// timeout: a second wait on top of the first would take that long.
const SERVICE_MARGIN_MS = PROMPT_MS;

type Kind = 'idempotent' | 'plain' | 'mixed';

// The client: warms its connections (one create per request it will send, half with a key), says
// `warm`, then on a line on stdin sends its requests at once (`idempotent`: each with its own
// Idempotency-Key; `plain`: none; `mixed`: every other one) and prints each one's status, Error
// code and milliseconds taken as one JSON line.
const CLIENT = `
const [url, key, kind, count] = process.argv.slice(1);
const post = (name, idempotencyKey) =>
  fetch(url + '/v1/pets', {
    method: 'POST',
    headers: {
      authorization: 'Bearer ' + key,
      'content-type': 'application/json',
      ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }),
    },
    body: JSON.stringify({ name, categoryId: 7 }),
  });
const many = (each) => Promise.all(Array.from({ length: Number(count) }, (_, i) => each(i)));
const warm = await many(async (i) => (await post('Warm ' + i, i % 2 === 0 ? 'warm-' + i : undefined)).status);
process.stdout.write(JSON.stringify({ warm }) + '\\n');
await new Promise((resolve) => process.stdin.once('data', resolve));
const withKey = (i) => kind === 'idempotent' || (kind === 'mixed' && i % 2 === 0);
const answers = await many(async (i) => {
  const started = performance.now();
  try {
    const response = await post('Rex ' + i, withKey(i) ? 'key-' + i : undefined);
    const { code } = await response.json();
    return { status: response.status, code, ms: performance.now() - started };
  } catch (error) {
    return { status: 0, code: String(error), ms: performance.now() - started };
  }
});
process.stdout.write(JSON.stringify({ answers }) + '\\n');
`;

interface Answer {
  status: number;
  code?: string;
  ms: number;
}

/** The client process, warmed: `send()` makes it send its requests and resolves to their answers. */
async function warmClient(t: TestContext, url: string, key: string, kind: Kind) {
  const child = spawn(process.execPath, ['--input-type=module', '-e', CLIENT, url, key, kind, String(WAITING)]);
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  const lines: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  child.stdout.on('data', (chunk) => {
    output += chunk;
    for (let end = output.indexOf('\n'); end >= 0; end = output.indexOf('\n')) {
      const line = output.slice(0, end);
      output = output.slice(end + 1);
      const reader = waiting.shift();
      if (reader) reader(line);
      else lines.push(line);
    }
  });
  const exited = new Promise<never>((_, reject) =>
    child.on('exit', (code) => reject(new Error(`client exited ${code}`))),
  );
  void exited.catch(() => undefined);
  const nextLine = () =>
    Promise.race([
      new Promise<string>((resolve) => (lines.length ? resolve(lines.shift()!) : waiting.push(resolve))),
      exited,
    ]);
  const { warm } = JSON.parse(await nextLine()) as { warm: number[] };
  assert.deepEqual(new Set(warm), new Set([201]), 'the warm-up creates');
  return {
    send: async () => {
      child.stdin.write('go\n');
      return (JSON.parse(await nextLine()) as { answers: Answer[] }).answers;
    },
  };
}

async function serviceOnFile(t: TestContext, kind: Kind) {
  // One client address opens all the connections: the per-address share would refuse some.
  const env = childEnv(t, {
    PETSTORE_DB_TIMEOUT_MS: String(TIMEOUT_MS),
    PETSTORE_RATE_LIMIT: 'off',
    PETSTORE_MAX_CONNECTIONS_PER_ADDRESS: 'off',
  });
  await migrateDatabase(env);
  const { key } = JSON.parse((await runKeys(['create', '--name', 'lock', '--json'], env)).stdout) as {
    key: string;
  };
  const server = await startServer(t, env);
  let log = '';
  server.child.stdout!.on('data', (chunk) => (log += chunk));
  /** durationMs of each 503 to a create the service has logged (docs/operations.md, the request log). */
  const refusalsLogged = () =>
    log
      .split('\n')
      .filter((line) => line.includes('"path":"/v1/pets"') && line.includes('"status":503'))
      .map((line) => (JSON.parse(line) as { durationMs: number }).durationMs);
  const auth = { authorization: `Bearer ${key}` };
  const db = new Database(env.PETSTORE_DB!);
  t.after(() => db.close());
  const total = (table: string) => db.prepare(`SELECT count(*) FROM ${table}`).pluck().get() as number;
  const create = (name: string, idempotencyKey?: string) =>
    fetch(`${server.url}/v1/pets`, {
      method: 'POST',
      headers: {
        ...auth,
        'content-type': 'application/json',
        ...(idempotencyKey === undefined ? {} : { 'idempotency-key': idempotencyKey }),
      },
      body: JSON.stringify({ name, categoryId: 7 }),
    });
  // Warm: as many connections open as the client uses and the create paths run once, so what is
  // timed below is the wait for the lock, not a cold start.
  const client = await warmClient(t, server.url, key, kind);
  const before = { pets: total('pets'), idempotency_keys: total('idempotency_keys') };
  /** Rows of `table` added since the warm-up. */
  const count = (table: keyof typeof before) => total(table) - before[table];
  return { url: server.url, auth, db, count, create, client, refusalsLogged };
}

/**
 * The answers to `requests` while `/healthz` is asked again and again, one probe 10 ms after the
 * other, until they all came: at most 1000 probes.
 */
async function whileProbingHealth(url: string, requests: Promise<Answer[]>, refusalsLogged: () => number[]) {
  let settled = false;
  const all = requests.finally(() => (settled = true));
  const probes: number[] = [];
  for (let i = 0; i < 1000 && !settled; i++) {
    const started = performance.now();
    const response = await fetch(`${url}/healthz`);
    assert.equal(response.status, 200);
    await response.arrayBuffer();
    probes.push(performance.now() - started);
    await sleep(10);
  }
  const answers = await all;
  // The log lines are written as the answers are sent: a moment to read them, 2 s at most.
  for (let i = 0; i < 40 && refusalsLogged().length < WAITING; i++) await sleep(50);
  return { answers, probes, logged: refusalsLogged() };
}

function assertRefusedInTime(
  { answers, probes, logged }: { answers: Answer[]; probes: number[]; logged: number[] },
  what: string,
): void {
  const ms = (list: number[]) => `${Math.min(...list).toFixed(0)} to ${Math.max(...list).toFixed(0)} ms`;
  const seen = answers.map((answer) => answer.ms);
  const figures = `${what}: /healthz max ${Math.max(...probes).toFixed(0)} ms over ${probes.length} probes; 503 after ${ms(logged)} in the service's log, ${ms(seen)} at the client (timeout ${TIMEOUT_MS} ms)`;
  if (process.env.PETSTORE_TEST_FIGURES) console.log(figures);
  assert.equal(answers.length, WAITING);
  for (const answer of answers) assert.deepEqual([answer.status, answer.code], [503, 'unavailable'], figures);
  assert.ok(probes.length >= 3, figures);
  assert.ok(Math.max(...probes) < PROMPT_MS, figures);
  assert.equal(logged.length, WAITING, figures);
  assert.ok(Math.min(...logged) >= TIMEOUT_MS - 1, figures);
  assert.ok(Math.max(...logged) < TIMEOUT_MS + SERVICE_MARGIN_MS, figures);
  assert.ok(Math.max(...seen) < 2 * TIMEOUT_MS, figures);
}

test('100 idempotent creates waiting for a lock another process holds get 503 within PETSTORE_DB_TIMEOUT_MS while /healthz answers promptly', async (t) => {
  const { url, db, count, create, client, refusalsLogged } = await serviceOnFile(t, 'idempotent');
  db.exec('BEGIN IMMEDIATE');
  const waited = await whileProbingHealth(url, client.send(), refusalsLogged);
  db.exec('ROLLBACK');
  assertRefusedInTime(waited, 'idempotent creates');

  assert.equal(count('pets'), 0);
  assert.equal(count('idempotency_keys'), 0);
  // The 503s were not remembered: the same keys create now, once each.
  const again = await Promise.all([create('Rex 0', 'key-0'), create('Rex 1', 'key-1'), create('Max')]);
  assert.deepEqual(
    again.map((response) => response.status),
    [201, 201, 201],
  );
  assert.equal((await create('Rex 0', 'key-0')).headers.get('idempotent-replayed'), 'true');
  assert.equal(count('pets'), 3);
});

test('100 plain creates waiting for a lock another process holds get 503 within PETSTORE_DB_TIMEOUT_MS while /healthz answers promptly', async (t) => {
  const { url, db, count, create, client, refusalsLogged } = await serviceOnFile(t, 'plain');
  db.exec('BEGIN IMMEDIATE');
  const waited = await whileProbingHealth(url, client.send(), refusalsLogged);
  db.exec('ROLLBACK');
  assertRefusedInTime(waited, 'plain creates');

  assert.equal(count('pets'), 0);
  assert.equal((await create('Max')).status, 201);
  assert.equal(count('pets'), 1);
});

test('creates of both kinds mixed with reads, while another process holds the lock: reads answer, creates get 503 in time', async (t) => {
  const { url, auth, db, count, create, client, refusalsLogged } = await serviceOnFile(t, 'mixed');
  const before = (await (await create('Before')).json()) as { id: number };
  db.exec('BEGIN IMMEDIATE');
  const requests = client.send();
  // WAL: readers do not wait for a writer; each read answers while the creates wait.
  const reads: { status: number; ms: number }[] = [];
  for (let i = 0; i < 6; i++) {
    const started = performance.now();
    const path = i % 2 === 0 ? `/v1/pets/${before.id}` : '/v1/pets?limit=100';
    const response = await fetch(`${url}${path}`, { headers: auth });
    await response.arrayBuffer();
    reads.push({ status: response.status, ms: performance.now() - started });
  }
  const waited = await whileProbingHealth(url, requests, refusalsLogged);
  db.exec('ROLLBACK');
  assertRefusedInTime(waited, 'mixed creates');
  for (const read of reads) {
    assert.equal(read.status, 200);
    assert.ok(read.ms < PROMPT_MS, `a read took ${read.ms.toFixed(0)} ms while creates waited`);
  }
  assert.equal(count('pets'), 1, 'only the create made before the lock');
  assert.equal(count('idempotency_keys'), 0);
});

// The same in one process, at the Store: the calls of every kind that wait for the lock, and
// what a read refused by a lock (a checkpoint, a migration) goes through.

const IN_PROCESS_TIMEOUT_MS = 500;

test('every store call waiting for the lock fails unavailable once, at the timeout, while timers keep running', async (t) => {
  const { store, path } = await tempSqliteStore(t, { busyTimeoutMs: IN_PROCESS_TIMEOUT_MS });
  const newKey = (name: string) => ({ name, hint: 'psk_abcd', hash: randomBytes(32), createdAt: new Date() });
  const owner = await store.createKey(newKey('owner'));
  const other = new Database(path);
  t.after(() => other.close());
  other.exec('BEGIN IMMEDIATE');

  // A 5 ms timer: the longest gap between two of its ticks is the longest the thread was held.
  let last = performance.now();
  let longestGap = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    longestGap = Math.max(longestGap, now - last);
    last = now;
  }, 5);
  t.after(() => clearInterval(ticker));
  const now = Date.now();
  const claim = (key: string) => ({
    apiKeyId: owner.id,
    key,
    fingerprint: Buffer.alloc(32),
    now,
    expiresAt: now + 60_000,
  });
  const respond = (created: { id: bigint }) => ({ status: 201, body: '{}', location: `/v1/pets/${created.id}` });
  const pet = { name: 'Rex', categoryId: 7n, status: 'available' as const };
  const started = performance.now();
  const calls: Promise<unknown>[] = [
    ...Array.from({ length: 50 }, (_, i) => store.createPetOnce(pet, claim(`k${i}`), respond)),
    ...Array.from({ length: 50 }, () => store.createPet(pet)),
    store.createKey(newKey('second')),
    store.revokeKey(owner.id, new Date()),
    store.rollKey({
      id: owner.id,
      successor: { hint: 'psk_efgh', hash: randomBytes(32), createdAt: new Date() },
      oldExpiresAt: new Date(now + 60_000),
      at: new Date(),
    }),
  ];
  const settled = await Promise.all(
    calls.map((call) =>
      call.then(
        () => ({ error: undefined, ms: performance.now() - started }),
        (error: unknown) => ({ error, ms: performance.now() - started }),
      ),
    ),
  );
  clearInterval(ticker);
  other.exec('ROLLBACK');

  const slowest = Math.max(...settled.map((call) => call.ms));
  const figures = `refused after ${Math.min(...settled.map((call) => call.ms)).toFixed(0)} to ${slowest.toFixed(0)} ms (timeout ${IN_PROCESS_TIMEOUT_MS} ms); the thread was held ${longestGap.toFixed(0)} ms at most`;
  if (process.env.PETSTORE_TEST_FIGURES) console.log(figures);
  for (const { error, ms } of settled) {
    assert.ok(error instanceof StoreUnavailableError, `${String(error)}: ${figures}`);
    assert.ok(ms >= IN_PROCESS_TIMEOUT_MS - 1, figures);
  }
  // Well short of twice the timeout: one deadline per call, not one per layer of retries.
  assert.ok(slowest < IN_PROCESS_TIMEOUT_MS * 1.5, figures);
  assert.ok(longestGap < IN_PROCESS_TIMEOUT_MS / 2, figures);
  assert.equal((await store.listKeys()).length, 1);
  assert.equal((await store.listPets({ limit: 5 })).length, 0);
  assert.equal((await store.createPet(pet)).name, 'Rex');
});

test('a call refused by a lock is tried again after pauses that block nothing, and fails at the timeout with the error given', async () => {
  const busy = () => Object.assign(new Error('database is locked'), { code: 'SQLITE_BUSY' });
  const retry = {
    when: (error: unknown) => (error as { code?: string }).code === 'SQLITE_BUSY',
    timeoutMs: 200,
    exhausted: (error: unknown) => new StoreUnavailableError(error),
  };
  assert.equal(
    retrying(() => 7, retry),
    7,
    'a first try that succeeds answers at once, without a promise',
  );
  assert.throws(() => retrying(() => JSON.parse('{'), retry), SyntaxError);

  let tries = 0;
  assert.equal(
    await retrying(() => {
      if (++tries < 4) throw busy();
      return 'read';
    }, retry),
    'read',
  );
  assert.equal(tries, 4);

  let refusals = 0;
  const started = performance.now();
  await assert.rejects(
    Promise.resolve(
      retrying(() => {
        refusals++;
        throw busy();
      }, retry),
    ),
    StoreUnavailableError,
  );
  const waited = performance.now() - started;
  assert.ok(waited >= 199 && waited < 300, `refused after ${waited.toFixed(0)} ms`);
  // 5, 10, 20, 40, 80, then the last at the deadline: a handful of tries, not one per millisecond.
  assert.ok(refusals >= 3 && refusals <= 9, `${refusals} tries`);

  let other = 0;
  await assert.rejects(
    Promise.resolve(
      retrying(() => {
        if (++other === 1) throw busy();
        throw new TypeError('not a lock');
      }, retry),
    ),
    TypeError,
  );
});
