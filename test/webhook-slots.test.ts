import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { FAST_MS, firstWindow, nextWindow } from '../src/events/pace.js';
import { retryDelay } from '../src/events/retries.js';
import {
  allotSlots,
  DOWN_AFTER,
  endpointAfter,
  healthOf,
  reserveOf,
  shareOf,
  sharesOf,
  type Allotment,
  type EndpointTurn,
} from '../src/events/slots.js';

test('shareOf: the largest share every endpoint can have, max-min fair, never less than one', () => {
  fc.assert(
    fc.property(
      fc.array(fc.integer({ min: 0, max: 100 }), { maxLength: 300 }),
      fc.integer({ min: 1, max: 1000 }),
      (demands, slots) => {
        const share = shareOf(demands, slots);
        const held = (level: number) => demands.reduce((sum, demand) => sum + Math.min(demand, level), 0);
        if (share === Infinity) return assert.ok(held(Infinity) <= slots);
        assert.ok(Number.isInteger(share) && share >= 1);
        if (share > 1) assert.ok(held(share) <= slots, `${held(share)} held with share ${share} of ${slots}`);
        assert.ok(held(share + 1) > slots, `share ${share} could be ${share + 1}`);
      },
    ),
    { numRuns: 2000 },
  );
  assert.equal(shareOf([1, 1, 40], 16), 14);
  assert.equal(shareOf(new Array<number>(1000).fill(1), 64), 1);
  assert.equal(shareOf([3, 4], 64), Infinity);
});

/** Every rule allotSlots promises, checked on one answer (docs/webhooks.md#isolation). */
function checkAllotment(endpoints: EndpointTurn[], concurrency: number, now: number, allotted: Allotment[]) {
  const byId = new Map(endpoints.map((endpoint) => [endpoint.id, endpoint]));
  const count = new Map(allotted.map((a) => [a.endpointId, a.count]));
  assert.equal(count.size, allotted.length, 'one allotment per endpoint');
  const held = endpoints.reduce((sum, e) => sum + e.inFlight, 0);
  const given = allotted.reduce((sum, a) => sum + a.count, 0);
  const free = Math.max(0, concurrency - held);
  assert.ok(given <= free, `${given} given with ${free} free`);
  const reserve = reserveOf(concurrency);
  const shares = sharesOf(endpoints, { concurrency, now });
  const othersHeld = (extra: boolean) =>
    endpoints
      .filter((e) => e.health !== 'up')
      .reduce((sum, e) => sum + e.inFlight + (extra ? (count.get(e.id) ?? 0) : 0), 0);
  const othersGiven = othersHeld(true) - othersHeld(false);
  if (othersGiven > 0) assert.ok(othersHeld(true) <= concurrency - reserve, 'endpoints not up stay out of the reserve');
  const wantOf = (e: EndpointTurn) => {
    if (!e.pending) return 0;
    if (e.health === 'down') return e.inFlight === 0 && (e.probeAt === null || e.probeAt <= now) ? 1 : 0;
    return Math.max(0, Math.min(e.window, e.health === 'up' ? shares.up : shares.others) - e.inFlight);
  };
  for (const a of allotted) {
    const e = byId.get(a.endpointId)!;
    assert.ok(a.count > 0 && e.pending, 'only pending endpoints, a positive count');
    assert.equal(a.probe, e.health === 'down', 'a probe exactly when down');
    assert.ok(a.count <= wantOf(e), `endpoint ${e.id} (${e.health}) got ${a.count}, wanted ${wantOf(e)}`);
  }
  const othersFull = othersHeld(true) >= concurrency - reserve;
  const eligible = (e: EndpointTurn) => e.health === 'up' || !othersFull;
  // Work-conserving: a slot left free means every eligible endpoint got what it wanted.
  if (given < free) {
    for (const e of endpoints) {
      if (eligible(e)) assert.equal(count.get(e.id) ?? 0, wantOf(e), `endpoint ${e.id} left wanting with slots free`);
    }
  }
  // Isolation: the reserve is there for endpoints that are up, whatever the others hold.
  const upHeld = endpoints.filter((e) => e.health === 'up').reduce((sum, e) => sum + e.inFlight, 0);
  const idleUp = endpoints.filter((e) => e.health === 'up' && e.pending && e.inFlight === 0);
  if (othersHeld(false) <= concurrency - reserve && idleUp.length + upHeld <= reserve) {
    for (const e of idleUp) assert.ok((count.get(e.id) ?? 0) > 0, `endpoint ${e.id}, up and waiting, got no slot`);
  }
  // Fair: an endpoint left wanting holds at most one fewer than any endpoint given a slot.
  for (const a of allotted) {
    const i = byId.get(a.endpointId)!;
    for (const j of endpoints) {
      if (!eligible(j) || (count.get(j.id) ?? 0) >= wantOf(j)) continue;
      assert.ok(
        i.inFlight + a.count <= j.inFlight + (count.get(j.id) ?? 0) + 1,
        `endpoint ${i.id} holds ${i.inFlight + a.count} while ${j.id} holds ${j.inFlight + (count.get(j.id) ?? 0)} and wants more`,
      );
    }
  }
}

const turn = fc.record({
  id: fc.nat(),
  health: fc.constantFrom('up' as const, 'unproven' as const, 'down' as const),
  inFlight: fc.integer({ min: 0, max: 20 }),
  window: fc.integer({ min: 1, max: 80 }),
  probeAt: fc.option(fc.integer({ min: 0, max: 2000 }), { nil: null }),
  pending: fc.boolean(),
  servedAt: fc.integer({ min: 0, max: 1000 }),
});

test('allotSlots keeps its rules for any population, from one endpoint to thousands', () => {
  const population = (max: number) =>
    fc.uniqueArray(turn, { minLength: 1, maxLength: max, selector: (e) => e.id }).map((endpoints) =>
      // A down endpoint holds at most one: its probe (attempts made before it went down have ended).
      endpoints.map((e) => (e.health === 'down' ? { ...e, inFlight: Math.min(e.inFlight, 1) } : e)),
    );
  for (const [max, runs] of [
    [5, 3000],
    [60, 800],
    [3000, 40],
  ] as const) {
    fc.assert(
      fc.property(
        population(max),
        fc.integer({ min: 1, max: 300 }),
        fc.integer({ min: 0, max: 2000 }),
        (endpoints, concurrency, now) => {
          checkAllotment(endpoints, concurrency, now, allotSlots(endpoints, { concurrency, now }));
        },
      ),
      { numRuns: runs },
    );
  }
});

test('endpointAfter: down after DOWN_AFTER failures in a row, probed on the schedule of one event, released by a success', () => {
  fc.assert(
    fc.property(
      fc.array(fc.record({ ok: fc.boolean(), retry: fc.option(fc.integer({ min: 0, max: 10 ** 7 })) }), {
        maxLength: 60,
      }),
      fc.integer({ min: 10, max: 100_000 }),
      fc.double({ min: 0, max: 1, noNaN: true }),
      (outcomes, retryMs, jitter) => {
        let state = { failures: 0, probeAt: null as number | null };
        let inRow = 0;
        for (const [i, { ok, retry }] of outcomes.entries()) {
          const at = i * 1000;
          const retryAt = retry === null ? undefined : at + retry;
          const next = endpointAfter(state, { ok, at, retryAt, jitter }, retryMs);
          inRow = ok ? 0 : inRow + 1;
          assert.equal(next.failures, inRow);
          assert.equal(next.released, ok && state.failures >= DOWN_AFTER);
          if (inRow < DOWN_AFTER) assert.equal(next.probeAt, null);
          else {
            const backoff = at + retryDelay(inRow, retryMs, () => jitter);
            assert.equal(next.probeAt, retryAt === undefined ? backoff : Math.min(backoff, retryAt));
          }
          assert.equal(
            healthOf({ failures: next.failures, succeeded: true }),
            next.failures >= DOWN_AFTER ? 'down' : next.failures ? 'unproven' : 'up',
          );
          state = next;
        }
      },
    ),
    { numRuns: 500 },
  );
  assert.equal(healthOf({ failures: 0, succeeded: false }), 'unproven');
});

test('nextWindow: grows by one per fast success, shrinks on slow ones and failures, one after a timeout, within 1..most', () => {
  fc.assert(
    fc.property(
      fc.integer({ min: 1, max: 300 }),
      fc.integer({ min: 1, max: 300 }),
      fc.boolean(),
      fc.boolean(),
      fc.integer({ min: 0, max: 20_000 }),
      (window, most, ok, timedOut, durationMs) => {
        const next = nextWindow(window, { ok, timedOut: !ok && timedOut, durationMs }, most);
        assert.ok(next >= 1 && next <= most);
        if (ok && durationMs < FAST_MS) assert.equal(next, Math.min(most, window + 1));
        if (ok && durationMs >= FAST_MS) assert.equal(next, Math.max(1, Math.min(most, window - 1)));
        if (!ok && timedOut) assert.equal(next, 1);
        if (!ok && !timedOut) assert.equal(next, Math.max(1, Math.min(most, Math.floor(window / 2))));
      },
    ),
    { numRuns: 2000 },
  );
  assert.equal(firstWindow('up'), 4);
  assert.equal(firstWindow('unproven'), 1);
});

/** An endpoint of the simulation, and how its receiver behaves. */
interface Simulated extends EndpointTurn {
  kind: 'healthy' | 'hanging' | 'flaky';
  failures: number;
  succeeded: boolean;
  /** Deliveries waiting. */
  backlog: number;
  /** Start times of the attempts in flight. */
  started: number[];
}

type Step =
  | { kind: 'look' }
  | { kind: 'events'; count: number }
  | { kind: 'tick'; ms: number }
  | { kind: 'answer'; pick: number; ok: boolean; ms: number };

const steps = fc.array(
  fc.oneof(
    { weight: 4, arbitrary: fc.constant<Step>({ kind: 'look' }) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 50 }).map((count): Step => ({ kind: 'events', count })) },
    { weight: 2, arbitrary: fc.integer({ min: 1, max: 4000 }).map((ms): Step => ({ kind: 'tick', ms })) },
    {
      weight: 3,
      arbitrary: fc
        .record({ pick: fc.nat(), ok: fc.boolean(), ms: fc.integer({ min: 1, max: 3000 }) })
        .map((answer): Step => ({ kind: 'answer', ...answer })),
    },
  ),
  { minLength: 20, maxLength: 150 },
);

const TIMEOUT_MS = 10_000;
const RETRY_MS = 1000;
const LEASE_MS = TIMEOUT_MS + 5000;

/**
 * A relay's life with `population` endpoints: healthy ones answer every attempt at once, hanging
 * ones never answer (each attempt times out), flaky ones as the steps say. Every look is checked
 * against allotSlots' rules, and the isolation the docs promise holds at each: whatever the
 * others do, every healthy endpoint that is up with deliveries waiting gets a slot, as long as
 * they, the other endpoints up and waiting, and what those that are up hold fit in the reserve, and the endpoints not up
 * hold no more than the rest (a flaky endpoint that fails keeps what it took while up, until
 * those attempts end).
 */
function simulate(population: Simulated['kind'][], concurrency: number, run: Step[]) {
  let now = 0;
  const endpoints: Simulated[] = population.map((kind, id) => ({
    id,
    kind,
    health: 'unproven',
    failures: 0,
    succeeded: kind === 'healthy',
    inFlight: 0,
    window: 1,
    probeAt: null,
    pending: true,
    servedAt: 0,
    backlog: 20,
    started: [],
  }));
  const healthy = endpoints.filter((e) => e.kind === 'healthy');
  for (const e of endpoints) e.health = healthOf(e);
  for (const e of endpoints) e.window = firstWindow(e.health);
  const end = (e: Simulated, ok: boolean, durationMs: number, timedOut: boolean) => {
    e.started.shift();
    e.inFlight -= 1;
    const next = endpointAfter(e, { ok, at: now, retryAt: now + RETRY_MS, jitter: 0.5 }, RETRY_MS);
    e.failures = next.failures;
    e.probeAt = next.probeAt;
    e.succeeded ||= ok;
    if (ok) e.backlog -= 1;
    e.health = healthOf(e);
    e.window = nextWindow(e.window, { ok, timedOut, durationMs }, concurrency);
    if (ok || next.released) e.pending = e.backlog > 0;
  };
  for (const step of run) {
    if (step.kind === 'events') {
      for (const e of endpoints) {
        e.backlog += step.count;
        e.pending = true;
      }
    } else if (step.kind === 'tick') {
      now += step.ms;
      for (const e of endpoints) {
        while (e.started.length > 0 && e.started[0]! + TIMEOUT_MS <= now) end(e, false, TIMEOUT_MS, true);
        // A retry or a probe came due: the relay's timer marks it pending.
        if (e.backlog > 0) e.pending = true;
      }
    } else if (step.kind === 'answer') {
      const flaky = endpoints.filter((e) => e.kind === 'flaky' && e.inFlight > 0);
      if (flaky.length > 0) end(flaky[step.pick % flaky.length]!, step.ok, step.ms, false);
    } else {
      const allotted = allotSlots(endpoints, { concurrency, now });
      checkAllotment(endpoints, concurrency, now, allotted);
      const got = new Map(allotted.map((a) => [a.endpointId, a.count]));
      // What flaky endpoints hold while up, and keep once they fail, until those attempts end.
      const held = (up: boolean) =>
        endpoints.filter((e) => (e.health === 'up') === up).reduce((sum, e) => sum + e.inFlight, 0);
      const reserve = reserveOf(concurrency);
      const idleUp = endpoints.filter((e) => e.health === 'up' && e.pending && e.inFlight === 0).length;
      if (held(false) <= concurrency - reserve && idleUp + held(true) <= reserve) {
        for (const e of healthy) {
          if (e.health === 'up' && e.pending && e.backlog > 0) {
            assert.ok((got.get(e.id) ?? 0) > 0, `healthy endpoint ${e.id} got no slot at ${now} ms`);
          }
        }
      }
      for (const a of allotted) {
        const e = endpoints[a.endpointId]!;
        // A claim is short when fewer deliveries wait than were asked for.
        const taken = Math.min(a.count, e.backlog - e.inFlight);
        if (a.probe) e.probeAt = now + LEASE_MS;
        e.servedAt = now;
        e.pending = taken === a.count;
        for (let i = 0; i < taken; i++) {
          e.inFlight += 1;
          e.started.push(now);
        }
      }
      // Healthy receivers answer at once, each attempt within a millisecond.
      for (const e of healthy) while (e.inFlight > 0) end(e, true, 1, false);
    }
    assert.ok(
      endpoints.reduce((sum, e) => sum + e.inFlight, 0) <= concurrency,
      'no more in flight than the concurrency',
    );
  }
}

const kinds = (max: number) =>
  fc.array(
    fc.oneof(
      { weight: 1, arbitrary: fc.constant('healthy' as const) },
      { weight: 6, arbitrary: fc.constant('hanging' as const) },
      { weight: 2, arbitrary: fc.constant('flaky' as const) },
    ),
    { minLength: 1, maxLength: max },
  );

test('a relay driven through random steps keeps every rule, and healthy endpoints get slots whatever the others do', () => {
  for (const [max, runs] of [
    [4, 400],
    [40, 150],
    [2000, 12],
  ] as const) {
    fc.assert(
      fc.property(kinds(max), fc.integer({ min: 1, max: 128 }), steps, (population, concurrency, run) => {
        simulate(population, concurrency, run);
      }),
      { numRuns: runs },
    );
  }
});

test('with 1,000 endpoints that never answer, each with deliveries waiting, a healthy one is given slots at every look', () => {
  const population = [...new Array<'hanging'>(1000).fill('hanging'), 'healthy' as const];
  const run: Step[] = [];
  for (let i = 0; i < 200; i++) run.push({ kind: 'look' }, { kind: 'events', count: 1 }, { kind: 'tick', ms: 250 });
  simulate(population, 64, run);
});
