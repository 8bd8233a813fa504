import assert from 'node:assert/strict';
import { test } from 'node:test';
import { holder, listen, servedKeptOpen, sleep, type Hold } from './crowd.js';

// A crowd as large as the slots (docs/hardening.md#connections): as many addresses as there are slots,
// each holding one connection, never keep a new client out. The rule itself is proved on every
// population size in test/slot-policy.test.ts; these show it on real sockets.

const refusals = (closed: Record<string, number>) =>
  (closed.address_full ?? 0) + (closed.address_cap ?? 0) + (closed.server_full ?? 0);
/**
 * Milliseconds until a new client from `address` is served on a connection it keeps open:
 * tried again 20 ms after a refusal (as clients and proxies do), for at most a second.
 */
async function servedWithin(app: Awaited<ReturnType<typeof listen>>, address: string): Promise<number> {
  const started = performance.now();
  while (performance.now() - started < 1_000) {
    if ((await servedKeptOpen(app.sockets, app.port, address)) !== Infinity) return performance.now() - started;
    await sleep(20);
  }
  return Infinity;
}

const evicted: Record<Hold, string> = { silent: 'silent_evicted', idle: 'idle_evicted', busy: 'busy_evicted' };

for (const how of ['silent', 'idle', 'busy'] as const) {
  test(`16 addresses each holding one of 16 slots with ${how === 'idle' ? 'an' : 'a'} ${how} connection: ten newcomers from other addresses are each served within a second`, async (t) => {
    const app = await listen(t, { PETSTORE_MAX_CONNECTIONS: '16' }, true);
    const cut = { count: 0 };
    await Promise.all(
      [...Array(16).keys()].map((i) => holder(t, app.sockets, app.port, `127.0.2.${1 + i}`, how, { cut })),
    );
    // Long enough for the silent and idle ones to count as such.
    await sleep(400);
    assert.equal(await app.openCount(), 16, 'the crowd took every slot');
    for (let i = 1; i <= 10; i++) {
      const waited = await servedWithin(app, `127.0.3.${i}`);
      assert.ok(
        waited < 1_000,
        `newcomer ${i} waited ${Math.round(waited)} ms: ${JSON.stringify(await app.closedBy())}`,
      );
    }
    await sleep(300);
    const closed = await app.closedBy();
    // Nobody refused for its group: every newcomer's held nothing, and so did the crowd's clients
    // that came back after giving a slot up. Silent and idle ones make room at once, so nobody was
    // refused at all; busy ones only after their answers, and newcomers that keep their
    // connections faster than that may find the spare slots taken (server_full) for a moment.
    assert.equal((closed.address_full ?? 0) + (closed.address_cap ?? 0), 0, JSON.stringify(closed));
    if (how !== 'busy') assert.equal(refusals(closed), 0, JSON.stringify(closed));
    assert.ok((closed[evicted[how]] ?? 0) >= 1, JSON.stringify(closed));
    assert.equal(cut.count, 0, 'a request was cut off');
  });
}

test('with the defaults, 1,100 addresses each holding one idle keep-alive connection used every 2 s: twenty newcomers from other addresses are each served within a second, at their first try', async (t) => {
  const app = await listen(t, {}, true);
  assert.equal(app.config.maxConnections, 1024);
  const cut = { count: 0 };
  const answeredAt = new Map<string, number>();
  const address = (i: number) => `127.0.${10 + Math.floor(i / 250)}.${1 + (i % 250)}`;
  // In waves, as a crowd arrives: past 1,024 the idle ones make room.
  for (let i = 0; i < 1_100; i += 100) {
    await Promise.all(
      [...Array(100).keys()].map((j) =>
        holder(t, app.sockets, app.port, address(i + j), 'idle', { againMs: 2_000, cut, answeredAt }),
      ),
    );
  }
  // Every client has used its connection again at least once.
  await sleep(2_500);
  assert.ok((await app.openCount()) >= 1_000, `${await app.openCount()} open`);
  const before = await app.closedBy();
  for (let i = 1; i <= 20; i++) {
    const waited = await servedKeptOpen(app.sockets, app.port, `127.1.0.${i}`);
    assert.ok(waited < 1_000, `newcomer ${i} waited ${Math.round(waited)} ms: ${JSON.stringify(await app.closedBy())}`);
  }
  const after = await app.closedBy();
  t.diagnostic(`closed before the newcomers: ${JSON.stringify(before)}; after: ${JSON.stringify(after)}`);
  assert.equal(refusals(after), 0, `refused as they opened: ${JSON.stringify(after)}`);
  assert.ok((after.idle_evicted ?? 0) > (before.idle_evicted ?? 0));
  // The crowd is served too: those that gave up a slot came back and were answered. (An idle
  // connection given up as its client reuses it loses that request to the crossing FIN, as on any
  // keep-alive server: RFC 9112 section 9.3.1 has the client send it again, on a new connection.)
  const since = performance.now();
  const unserved = () => [...Array(1_100).keys()].filter((i) => (answeredAt.get(address(i)) ?? 0) < since);
  // Each uses its connection every 2 s: one given up as it did so comes back 2 s later.
  while (unserved().length > 0 && performance.now() - since < 8_000) await sleep(100);
  assert.deepEqual(unserved(), [], 'clients of the crowd not answered again within 8 s');
});
