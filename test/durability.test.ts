import assert from 'node:assert/strict';
import { test } from 'node:test';
import { childEnv, runCli, startServer } from './process.js';

const CYCLES = 3;
const WORKERS = 8;

test('every acknowledged create survives kill -9, over several cycles', async (t) => {
  const env = childEnv(t);
  const { key } = JSON.parse((await runCli(['keys', 'create', '--name', 'ci', '--json'], env)).stdout);
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const acknowledged = new Map<number, string>();

  for (let cycle = 0; cycle < CYCLES; cycle++) {
    const server = await startServer(t, env);
    const killAfter = 20 + Math.floor(Math.random() * 60);
    let sent = 0;
    let killed = false;
    const worker = async (w: number) => {
      for (let i = 0; i < 400 && !killed; i++) {
        const body = JSON.stringify({ name: `c${cycle}-w${w}-${i}`, categoryId: 2 ** 53 + i, status: 'pending' });
        try {
          const response = await fetch(`${server.url}/v1/pets`, { method: 'POST', headers, body });
          if (response.status !== 201) throw new Error(`createPet answered ${response.status}`);
          const text = await response.text();
          acknowledged.set(Number(JSON.parse(text).id), text);
        } catch (error) {
          if (!killed) throw error;
          return;
        }
        if (++sent === killAfter) {
          killed = true;
          server.child.kill('SIGKILL');
        }
      }
    };
    await Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)));
    assert.equal((await server.exited).signal, 'SIGKILL', 'the server was killed mid-load');
  }

  const server = await startServer(t, env);
  const stored = new Map<number, string>();
  let next: string | null = '/v1/pets?limit=100';
  for (let page = 0; next && page < 1000; page++) {
    const response: Response = await fetch(server.url + next, { headers });
    const body = await response.text();
    for (const match of body.matchAll(/\{[^}]*\}/g)) stored.set(Number(/"id":(\d+)/.exec(match[0])![1]), match[0]);
    next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1] ?? null;
  }
  assert.ok(acknowledged.size >= CYCLES * 20, `${acknowledged.size} creates were acknowledged`);
  for (const [id, text] of acknowledged) assert.equal(stored.get(id), text, `pet ${id} as acknowledged`);
});
