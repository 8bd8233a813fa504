import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setImmediate as nextTurn, setTimeout as sleep } from 'node:timers/promises';
import type { PetStatus } from '../src/schemas.js';
import { groupCalls } from '../src/store/batches.js';
import type { ListQuery, PetRecord } from '../src/store/store.js';
import pg from 'pg';
import { openPostgresStore, pageKey } from '../src/store/postgres.js';
import { createPostgresSchema, migratedStore, storeKinds } from './stores.js';

const postgres = storeKinds.find((kind) => kind.name === 'PostgreSQL')!;

test('calls made in one turn of the event loop are run together, in the order made; a later call runs apart', async () => {
  const runs: number[][] = [];
  const doubled = groupCalls(async (inputs: number[]) => {
    runs.push(inputs);
    return inputs.map((n) => ({ status: 'fulfilled', value: n * 2 }) as const);
  });
  const first = [doubled.call(1), doubled.call(2), doubled.call(3)];
  await nextTurn();
  const later = doubled.call(4);
  assert.deepEqual(await Promise.all([...first, later]), [2, 4, 6, 8]);
  assert.deepEqual(runs, [[1, 2, 3], [4]]);
});

test('each call settles with its own outcome; when the run throws, every call of it fails', async () => {
  const checked = groupCalls(async (inputs: number[]) => {
    if (inputs.includes(0)) throw new Error('the run failed');
    return inputs.map((n): PromiseSettledResult<number> =>
      n < 0 ? { status: 'rejected', reason: new Error(`${n} refused`) } : { status: 'fulfilled', value: n },
    );
  });
  const alone = await Promise.allSettled([checked.call(1), checked.call(-2), checked.call(3)]);
  assert.deepEqual(
    alone.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : (outcome.reason as Error).message)),
    [1, '-2 refused', 3],
  );
  const together = await Promise.allSettled([checked.call(1), checked.call(0)]);
  assert.deepEqual(
    together.map((outcome) => outcome.status === 'rejected' && (outcome.reason as Error).message),
    ['the run failed', 'the run failed'],
  );
});

test('settle runs what is queued at once and waits for every run in flight', async () => {
  let finish = () => {};
  const slow = groupCalls(
    (inputs: string[]) =>
      new Promise<PromiseSettledResult<string>[]>((resolve) => {
        finish = () => resolve(inputs.map((value) => ({ status: 'fulfilled', value })));
      }),
  );
  const waiting = slow.call('a');
  let settled = false;
  const settling = slow.settle().then(() => (settled = true));
  await nextTurn();
  assert.equal(settled, false, 'a run is still in flight');
  finish();
  await settling;
  assert.equal(await waiting, 'a');
});

test(
  'PostgreSQL: getPet and listPets made at the same moment each get what they would alone',
  { skip: postgres.skip },
  async (t) => {
    const [store] = await migratedStore(postgres, t);
    const statuses: PetStatus[] = ['available', 'pending', 'sold'];
    for (let i = 0; i < 60; i++) {
      await store.createPet({ name: `Pet ${i}`, categoryId: 2n ** 62n + BigInt(i), status: statuses[i % 3]! });
    }
    const ids = [1n, 5n, 5n, 60n, 61n, 9_000_000_000_000_000_000n, 33n];
    const lists = [
      { limit: 21 },
      { afterId: 10n, limit: 5 },
      { afterId: 58n, limit: 21 },
      { afterId: 60n, limit: 3 },
      { status: 'pending' as const, limit: 4 },
      { status: 'sold' as const, afterId: 30n, limit: 21 },
      { status: 'available' as const, afterId: 59n, limit: 2 },
      { afterId: 10n, limit: 5 },
    ];
    // One at a time: each read alone in its turn.
    const alonePets: (PetRecord | undefined)[] = [];
    for (const id of ids) alonePets.push(await store.getPet(id));
    const alonePages: PetRecord[][] = [];
    for (const list of lists) alonePages.push(await store.listPets(list));
    // All at once: grouped.
    const [pets, pages] = await Promise.all([
      Promise.all(ids.map((id) => store.getPet(id))),
      Promise.all(lists.map((list) => store.listPets(list))),
    ]);
    assert.deepEqual(pets, alonePets);
    assert.deepEqual(pages, alonePages);
    // The expectations themselves, so that a read wrong both ways fails too.
    assert.deepEqual(
      pets.map((pet) => pet?.name),
      ['Pet 0', 'Pet 4', 'Pet 4', 'Pet 59', undefined, undefined, 'Pet 32'],
    );
    assert.deepEqual(
      pages.map((page) => page.map((pet) => Number(pet.id))),
      [
        Array.from({ length: 21 }, (_, i) => i + 1),
        [11, 12, 13, 14, 15],
        [59, 60],
        [],
        [2, 5, 8, 11],
        Array.from({ length: 10 }, (_, i) => 33 + 3 * i),
        [],
      ].concat([[11, 12, 13, 14, 15]]),
    );
  },
);

test("with keyOf (the PostgreSQL store's pageKey), calls of one turn with the same key run once and share its outcome", async () => {
  const runs: unknown[][] = [];
  const pages = groupCalls(async (queries: ListQuery[]) => {
    runs.push(queries);
    return queries.map((q, i): PromiseSettledResult<string> =>
      q.limit > 20
        ? { status: 'rejected', reason: new Error(`run ${i} refused`) }
        : { status: 'fulfilled', value: `run ${i}` },
    );
  }, pageKey);
  const outcomes = await Promise.allSettled([
    pages.call({ limit: 20 }),
    pages.call({ afterId: 0n, limit: 20 }),
    pages.call({ status: 'sold', limit: 20 }),
    pages.call({ afterId: 5n, limit: 20 }),
    pages.call({ limit: 20 }),
    pages.call({ afterId: 5n, limit: 21 }),
    pages.call({ status: 'sold', limit: 20 }),
  ]);
  assert.deepEqual(runs, [
    [{ limit: 20 }, { status: 'sold', limit: 20 }, { afterId: 5n, limit: 20 }, { afterId: 5n, limit: 21 }],
  ]);
  assert.deepEqual(
    outcomes.map((outcome) => (outcome.status === 'fulfilled' ? outcome.value : (outcome.reason as Error).message)),
    ['run 0', 'run 0', 'run 1', 'run 2', 'run 0', 'run 3 refused', 'run 1'],
  );
});

test(
  'PostgreSQL: one page asked for several times at the same moment comes to each caller whole, in an array of its own',
  { skip: postgres.skip },
  async (t) => {
    const [store] = await migratedStore(postgres, t);
    for (let i = 0; i < 6; i++) await store.createPet({ name: `Pet ${i}`, categoryId: BigInt(i), status: 'sold' });
    const pages = await Promise.all([
      store.listPets({ limit: 3 }),
      store.listPets({ afterId: 3n, limit: 3 }),
      store.listPets({ limit: 3 }),
      store.listPets({ limit: 3 }),
    ]);
    assert.deepEqual(
      pages.map((page) => page.map((pet) => Number(pet.id))),
      [
        [1, 2, 3],
        [4, 5, 6],
        [1, 2, 3],
        [1, 2, 3],
      ],
    );
    assert.notEqual(pages[0], pages[2]);
    assert.notEqual(pages[2], pages[3]);
    // The list route cuts the page it read to the limit asked: one caller's cut is not another's.
    pages[0]!.length = 1;
    assert.deepEqual(
      pages[3]!.map((pet) => pet.name),
      ['Pet 0', 'Pet 1', 'Pet 2'],
    );
  },
);

test(
  'PostgreSQL: pages of two statuses asked for at the same moment each hold their own status',
  { skip: postgres.skip },
  async (t) => {
    const [store] = await migratedStore(postgres, t);
    for (let i = 0; i < 6; i++) {
      await store.createPet({ name: `Pet ${i}`, categoryId: BigInt(i), status: i % 2 ? 'pending' : 'sold' });
    }
    const pages = await Promise.all([
      store.listPets({ status: 'sold', limit: 2 }),
      store.listPets({ status: 'pending', limit: 2 }),
      store.listPets({ status: 'sold', limit: 2 }),
      store.listPets({ status: 'pending', afterId: 2n, limit: 2 }),
    ]);
    assert.deepEqual(
      pages.map((page) => page.map((pet) => pet.name)),
      [
        ['Pet 0', 'Pet 2'],
        ['Pet 1', 'Pet 3'],
        ['Pet 0', 'Pet 2'],
        ['Pet 3', 'Pet 5'],
      ],
    );
  },
);

test(
  'PostgreSQL: the reads made at the same moment reach the database as one statement per kind',
  { skip: postgres.skip },
  async (t) => {
    const url = await createPostgresSchema(t);
    const store = openPostgresStore(url, { poolSize: 10 });
    t.after(() => store.close());
    await store.migrate();
    await store.createPet({ name: 'Rex', categoryId: 7n, status: 'pending' });
    // Every read of the table waits behind this lock, on a connection of its own: the database
    // then shows how many statements the store sent, each waiting on one of its connections.
    const locker = new pg.Client({ connectionString: url });
    await locker.connect();
    t.after(() => locker.end());
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE pets IN ACCESS EXCLUSIVE MODE');
    const { rows } = await locker.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    // Asked on the locker's own connection: pg_stat_activity is read afresh once its snapshot,
    // kept for the transaction, is cleared.
    const waitingStatements = async () => {
      await locker.query('SELECT pg_stat_clear_snapshot()');
      const result = await locker.query<{ count: string }>(
        'SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))',
        [rows[0]!.pid],
      );
      return Number(result.rows[0]!.count);
    };
    const reads = Promise.all([
      ...Array.from({ length: 8 }, (_, i) => store.getPet(BigInt(i + 1))),
      ...Array.from({ length: 4 }, (_, i) => store.listPets({ afterId: BigInt(i), limit: 21 })),
      ...Array.from({ length: 4 }, () => store.listPets({ status: 'pending', limit: 21 })),
    ]);
    // Ten connections would let ten statements wait; grouped, one per kind of read does.
    let waiting = 0;
    try {
      for (let tries = 0; tries < 50 && waiting < 3; tries++) {
        await sleep(100);
        waiting = await waitingStatements();
      }
      await sleep(300);
      waiting = await waitingStatements();
    } finally {
      await locker.query('COMMIT');
    }
    assert.equal(waiting, 3, 'statements waiting: getPet, listPets, listPets by status');
    const answers = await reads;
    assert.equal((answers[0] as PetRecord).name, 'Rex');
    assert.equal(answers.filter((answer) => answer === undefined).length, 7);
  },
);
