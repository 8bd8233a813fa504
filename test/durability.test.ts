import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { recordFigures, size } from './figures.js';
import { migrateDatabase, runKeys } from './in-process.js';
import { childEnv, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

const CYCLES = size.killCycles;
const WORKERS = 8;

const stores: { name: string; skip: string | false; env: (t: TestContext) => Promise<Record<string, string>> }[] = [
  { name: 'SQLite', skip: false, env: async (t) => childEnv(t) },
  {
    name: 'PostgreSQL',
    skip: postgresSkip && `${postgresSkip}: SKIPPED`,
    env: async (t) => childEnv(t, { DATABASE_URL: await createPostgresSchema(t) }),
  },
];

/** Every animal the service holds, page by page along its rel="next" links, as the raw JSON of each. */
async function readAll(url: string, headers: Record<string, string>): Promise<Map<bigint, string>> {
  const stored = new Map<bigint, string>();
  let next: string | null = '/v1/pets?limit=100';
  for (let page = 0; next && page < 10_000; page++) {
    const response: Response = await fetch(url + next, { headers });
    assert.equal(response.status, 200);
    for (const match of (await response.text()).matchAll(/\{[^}]*\}/g)) {
      stored.set(BigInt(/"id":(\d+)/.exec(match[0])![1]!), match[0]);
    }
    next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1] ?? null;
  }
  return stored;
}

for (const store of stores) {
  test(
    `every acknowledged create survives kill -9 at a random moment, over several cycles, on ${store.name}`,
    {
      skip: store.skip,
    },
    async (t) => {
      const env = await store.env(t);
      // keys create refuses a database that does not exist: migrate makes it, as serve would.
      await migrateDatabase(env);
      const { key } = JSON.parse((await runKeys(['create', '--name', 'ci', '--json'], env)).stdout);
      const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
      const acknowledged = new Map<bigint, string>();
      const sent = new Set<string>();
      const killDelays: number[] = [];

      for (let cycle = 0; cycle < CYCLES; cycle++) {
        const server = await startServer(t, env);
        // Any moment once creates flow, counted from the cycle's first 201 (a slow start would
        // otherwise be killed before any): mid-statement, mid-commit or between requests.
        const killAfterMs = 30 + Math.floor(Math.random() * 400);
        killDelays.push(killAfterMs);
        let killed = false;
        const kill = () => {
          killed = true;
          server.child.kill('SIGKILL');
        };
        // A server that never acknowledges is killed too, and the count below then fails.
        let timer = setTimeout(kill, 10_000);
        let flowing = false;
        const worker = async (w: number) => {
          for (let i = 0; !killed; i++) {
            const name = `c${cycle}-w${w}-${i}`;
            sent.add(name);
            // Beyond 2^53, so a create that came back rounded would show.
            const body = `{"name":"${name}","categoryId":${2n ** 62n + BigInt(i)},"status":"pending"}`;
            let response: Response;
            let text: string;
            try {
              response = await fetch(`${server.url}/v1/pets`, { method: 'POST', headers, body });
              text = await response.text();
            } catch (error) {
              // Only the connection may fail, and only because of the kill.
              if (killed) return;
              throw error;
            }
            assert.equal(response.status, 201, `createPet answered ${response.status}: ${text}`);
            acknowledged.set(BigInt(/"id":(\d+)/.exec(text)![1]!), text);
            if (!flowing) {
              flowing = true;
              clearTimeout(timer);
              timer = setTimeout(kill, killAfterMs);
            }
          }
        };
        await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
        clearTimeout(timer);
        assert.equal((await server.exited).signal, 'SIGKILL', 'the server was killed mid-load');
      }

      const server = await startServer(t, env);
      const stored = await readAll(server.url, headers);
      assert.ok(acknowledged.size >= CYCLES, `only ${acknowledged.size} creates were acknowledged`);
      const lost = [...acknowledged].filter(([id, text]) => stored.get(id) !== text);
      assert.deepEqual(lost, [], `${lost.length} acknowledged creates lost or changed`);
      // What is stored beyond the acknowledged was sent (an answer lost with the process), never invented.
      for (const text of stored.values()) assert.ok(sent.has(JSON.parse(text).name), `not sent: ${text}`);
      // Ids are never reused after a crash: the next one is above all that were handed out.
      const after = await fetch(`${server.url}/v1/pets`, {
        method: 'POST',
        headers,
        body: '{"name":"next","categoryId":1}',
      });
      const nextId = BigInt(/"id":(\d+)/.exec(await after.text())![1]!);
      assert.ok(
        [...stored.keys()].every((id) => id < nextId),
        `id ${nextId} was handed out before`,
      );
      recordFigures(`crash durability ${store.name}`, {
        cycles: CYCLES,
        acknowledged: acknowledged.size,
        storedAfterRestart: stored.size,
        lost: lost.length,
        killDelaysMs: killDelays,
      });
    },
  );
}
