import assert from 'node:assert/strict';
import { test } from 'node:test';
import { childEnv, runCli, startServer } from './process.js';

test('kill -9 right after a 201 keeps its event: every acknowledged create is in the feed after a restart', async (t) => {
  const env = childEnv(t);
  assert.equal((await runCli(['migrate'], env)).code, 0);
  const issued = await runCli(
    ['keys', 'create', '--name', 'ci', '--scope', 'pets:write', '--scope', 'events:read', '--json'],
    env,
  );
  assert.equal(issued.code, 0, issued.stderr);
  const { key, scopes } = JSON.parse(issued.stdout) as { key: string; scopes: string[] };
  assert.deepEqual(scopes, ['pets:write', 'events:read']);
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };

  const server = await startServer(t, env);
  const acknowledged: string[] = [];
  let killed = false;
  const worker = async (w: number) => {
    for (let i = 0; !killed && i < 10_000; i++) {
      // Beyond 2^53: an event whose data came back rounded would show.
      const body = `{"name":"w${w}-${i}","categoryId":${2n ** 62n + BigInt(i)}}`;
      let text: string;
      try {
        const response = await fetch(`${server.url}/v1/pets`, { method: 'POST', headers, body });
        text = await response.text();
        assert.equal(response.status, 201, text);
      } catch (error) {
        if (killed) return;
        throw error;
      }
      acknowledged.push(text);
      // Killed the moment the 20th 201 arrives: its commit is the latest the process made.
      if (acknowledged.length === 20) {
        killed = true;
        server.child.kill('SIGKILL');
      }
    }
  };
  await Promise.all([0, 1, 2, 3].map(worker));
  assert.equal((await server.exited).signal, 'SIGKILL');

  const restarted = await startServer(t, env);
  const data: string[] = [];
  let next: string | undefined = '/v1/events?limit=100';
  for (let page = 0; next && page < 100; page++) {
    const response: Response = await fetch(restarted.url + next, { headers });
    const text = await response.text();
    assert.equal(response.status, 200, text);
    data.push(...[...text.matchAll(/"data":(\{[^}]*\})\}/g)].map((match) => match[1]!));
    next = /<([^>]+)>; rel="next"/.exec(response.headers.get('link') ?? '')?.[1];
  }
  assert.ok(acknowledged.length >= 20);
  const listed = new Set(data);
  const lost = acknowledged.filter((body) => !listed.has(body));
  assert.deepEqual(lost, [], `${lost.length} acknowledged creates have no event`);
  assert.equal(listed.size, data.length, 'no event twice');
});
