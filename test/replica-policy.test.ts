import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import {
  caughtUpTo,
  checkTiming,
  chooseReplica,
  candidateOf,
  judgeReplica,
  lagOf,
  LEFT_OUT,
  UNCHECKED,
  type Candidate,
  type PrimaryReading,
  type PrimarySample,
  type ReplicaReading,
} from '../src/store/replica-policy.js';
import type { LeftOut } from '../src/store/store.js';

const MAX_LAG_MS = 1000;
const { everyMs: EVERY_MS, rules: RULES } = checkTiming(MAX_LAG_MS);
const TICK_MS = 10;

/** What a replica really is at a moment of the simulation, which the checks read. */
interface TrueReplica {
  /** What it has replayed. */
  replayed: bigint;
  /** How it behaves: replays within a tick, slowly (one write in `slowEvery` ticks), or not at all. */
  pace: 'fast' | 'slow' | 'stopped';
  /** Checks: answered, refused at once, or never answered. */
  network: 'up' | 'refusing' | 'silent';
  paused: boolean;
  promoted: boolean;
  /** Since when it has been paused, unreachable or promoted: it must be left out a second after. */
  badSince: number | undefined;
}

/** One change a step of the simulation may make. */
type Event =
  | { kind: 'write'; key: number }
  | { kind: 'read'; key: number; cursor: boolean }
  | { kind: 'replica'; index: number; change: Partial<Pick<TrueReplica, 'pace' | 'network' | 'paused' | 'promoted'>> }
  | { kind: 'primary'; network: 'up' | 'refusing' | 'silent' };

const events = (replicas: number, keys: number): fc.Arbitrary<Event> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.record({ kind: fc.constant('write' as const), key: fc.nat(keys - 1) }) },
    {
      weight: 8,
      arbitrary: fc.record({ kind: fc.constant('read' as const), key: fc.nat(keys - 1), cursor: fc.boolean() }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('replica' as const),
        index: fc.nat(replicas - 1),
        change: fc.oneof(
          fc.record({ pace: fc.constantFrom('fast' as const, 'slow' as const, 'stopped' as const) }),
          fc.record({ network: fc.constantFrom('up' as const, 'refusing' as const, 'silent' as const) }),
          fc.record({ paused: fc.boolean() }),
          fc.record({ promoted: fc.constant(true) }),
        ),
      }),
    },
    {
      weight: 1,
      arbitrary: fc.record({
        kind: fc.constant('primary' as const),
        network: fc.constantFrom('up' as const, 'refusing' as const, 'silent' as const),
      }),
    },
  );

/** A population: its size, and for each tick of the run the events that happen in it. */
const runs = fc
  .record({
    replicas: fc.oneof(fc.integer({ min: 1, max: 4 }), fc.integer({ min: 5, max: 300 })),
    keys: fc.integer({ min: 1, max: 3000 }),
  })
  .chain(({ replicas, keys }) =>
    fc.record({
      replicas: fc.constant(replicas),
      keys: fc.constant(keys),
      ticks: fc.array(fc.array(events(replicas, keys), { maxLength: 4 }), { minLength: 50, maxLength: 400 }),
    }),
  );

/**
 * The service's gathering and applying, around the policy, over simulated servers: checks every
 * EVERY_MS (a silent server's check fails after RULES.silentMs), each reading judged as it
 * arrives, reads choosing among the candidates. After every step it checks what the contract
 * promises of each read (docs/operations.md#read-replicas).
 */
function simulate({ replicas: count, ticks }: { replicas: number; keys: number; ticks: Event[][] }) {
  // Writes: the WAL position each reached, and when it was acknowledged, by key.
  let wal = 100n;
  const writes: { key: number; lsn: bigint; at: number }[] = [];
  const lastWrite = new Map<number, { lsn: bigint; at: number }>();
  const truth: TrueReplica[] = Array.from({ length: count }, () => ({
    replayed: wal,
    pace: 'fast',
    network: 'up',
    paused: false,
    promoted: false,
    badSince: undefined,
  }));
  let primaryNetwork: 'up' | 'refusing' | 'silent' = 'up';
  const primary: PrimaryReading = {
    firstAnsweredAt: undefined,
    answeredAt: undefined,
    failed: false,
    quietSince: undefined,
  };
  const samples: PrimarySample[] = [];
  const readings: ReplicaReading[] = truth.map(() => ({ ...UNCHECKED }));
  const replayedSeen = truth.map(() => -1n);
  const states: ('in_use' | LeftOut)[] = truth.map(() => 'unmeasured');
  const candidates: Candidate[] = truth.map(() => LEFT_OUT);
  // When each server's check in flight was asked for (a silent server's fails RULES.silentMs later).
  const asked: (number | undefined)[] = Array(count + 1).fill(undefined);
  const nextCheck: number[] = Array(count + 1).fill(0);
  const wroteAt = new Map<number, number>();
  let turn = 0;
  let reads = 0;
  let replicaReads = 0;
  let cursorAt = -1n;

  const judge = (now: number) => {
    for (let i = 0; i < count; i++) {
      const judged = judgeReplica(readings[i]!, primary, now, RULES, states[i]);
      states[i] = judged.inUse ? 'in_use' : judged.reason;
      candidates[i] = candidateOf(judged, replayedSeen[i]!);
      if (judged.inUse) assert.ok(judged.until >= now, 'in use until a time already past');
    }
  };
  const catchUp = (i: number) => {
    const upTo = caughtUpTo(samples, replayedSeen[i]!);
    const reading = readings[i]!;
    if (upTo !== undefined && (reading.caughtUpTo === undefined || upTo > reading.caughtUpTo))
      reading.caughtUpTo = upTo;
  };

  /** Server `s` (0: the primary; i + 1: replica i) answers, fails, or stays silent, at `now`; true when its check ended. */
  const check = (s: number, now: number): boolean => {
    const network = s === 0 ? primaryNetwork : truth[s - 1]!.network;
    if (asked[s] === undefined) {
      if (now < nextCheck[s]!) return false;
      asked[s] = now;
    }
    const at = asked[s]!;
    if (network === 'silent' && now - at < RULES.silentMs) return false;
    asked[s] = undefined;
    nextCheck[s] = now + EVERY_MS;
    if (s === 0) {
      if (network !== 'up') {
        primary.failed = true;
        primary.quietSince ??= at;
      } else {
        samples.push({ at, lsn: wal });
        if (samples.length > Math.ceil(MAX_LAG_MS / EVERY_MS) + 4) samples.shift();
        primary.firstAnsweredAt ??= at;
        primary.answeredAt = at;
        primary.failed = false;
        primary.quietSince = undefined;
        for (let i = 0; i < count; i++) catchUp(i);
      }
    } else {
      const i = s - 1;
      const replica = truth[i]!;
      if (network !== 'up') readings[i] = { ...readings[i]!, failed: true };
      else {
        if (replica.replayed > replayedSeen[i]!) replayedSeen[i] = replica.replayed;
        readings[i] = {
          ...readings[i]!,
          answeredAt: at,
          failed: false,
          recovering: !replica.promoted,
          paused: replica.paused,
          // Streaming here is instant: it has received all there is.
          drained: replica.replayed === wal,
        };
        catchUp(i);
      }
    }
    return true;
  };

  for (let tick = 0; tick < ticks.length; tick++) {
    const now = tick * TICK_MS;
    // Replay: a fast replica is at most a tick behind; a slow one replays one write in 30 ticks.
    for (const replica of truth) {
      if (replica.paused || replica.promoted || replica.pace === 'stopped') continue;
      if (replica.pace === 'fast') replica.replayed = wal;
      else if (tick % 30 === 0)
        replica.replayed = writes.find((w) => w.lsn > replica.replayed)?.lsn ?? replica.replayed;
    }
    // The readings of this instant judged, as each is when it arrives; between them, reads go by
    // what the last judgement said (its `until`).
    let read = false;
    for (let s = 0; s <= count; s++) read = check(s, now) || read;
    if (read) judge(now);
    for (const event of ticks[tick]!) {
      if (event.kind === 'write') {
        // Busy and quiet phases of 100 ticks: with no writes, a paused replica lags nothing, and
        // only its being paused leaves it out.
        if (primaryNetwork !== 'up' || tick % 200 >= 100) continue;
        wal += 8n;
        const write = { key: event.key, lsn: wal, at: now };
        writes.push(write);
        lastWrite.set(event.key, write);
        wroteAt.set(event.key, now);
      } else if (event.kind === 'primary') {
        primaryNetwork = event.network;
      } else if (event.kind === 'replica') {
        const replica = truth[event.index]!;
        Object.assign(replica, event.change);
        const bad = replica.paused || replica.promoted || replica.network !== 'up';
        replica.badSince = bad ? (replica.badSince ?? now) : undefined;
      } else {
        reads++;
        const needs = { wroteAt: wroteAt.get(event.key) ?? -Infinity, atLeast: event.cursor ? cursorAt : -1n };
        const index = chooseReplica(candidates, needs, now, turn++);
        const read = index < 0 ? wal : truth[index]!.replayed;
        if (index >= 0) {
          replicaReads++;
          const replica = truth[index]!;
          // A key reads its own writes.
          const own = lastWrite.get(event.key);
          assert.ok(!own || own.lsn <= replica.replayed, `key ${event.key} missed its write on replica ${index}`);
          // A page after a cursor misses nothing the page before saw.
          assert.ok(replica.replayed >= needs.atLeast, 'a page older than the page before it');
          // Within the bound: it holds every write acknowledged a bound ago (by the primary's last
          // answer, while it does not answer).
          const answering = !primary.failed && now - primary.answeredAt! <= RULES.silentMs;
          const upTo = (answering ? now : primary.answeredAt!) - MAX_LAG_MS;
          const missed = writes.find((w) => w.at < upTo && w.lsn > replica.replayed);
          assert.equal(missed, undefined, `replica ${index} lacks a write acknowledged more than the bound ago`);
          // Left out within a second of being paused, promoted or unreachable.
          assert.ok(
            replica.badSince === undefined || now - replica.badSince < 1000,
            `replica ${index} still read from`,
          );
          assert.equal(states[index], 'in_use');
        }
        // The page's position, as the route puts it in the next cursor; a replica's is news of it.
        cursorAt = read;
        if (index >= 0 && read > replayedSeen[index]!) {
          replayedSeen[index] = read;
          if (candidates[index] !== LEFT_OUT) candidates[index]!.replayed = read;
        }
      }
    }
  }
  return { reads, replicaReads };
}

test("every read goes to a replica that holds the key's writes, the page before and what is a bound old, and none left out a second ago, at every population size", (t) => {
  let reads = 0;
  let replicaReads = 0;
  fc.assert(
    fc.property(runs, (run) => {
      const counted = simulate(run);
      reads += counted.reads;
      replicaReads += counted.replicaReads;
    }),
    // A failing run is reported as found: shrinking runs of hundreds of steps takes minutes.
    { numRuns: 120, endOnFailure: true },
  );
  t.diagnostic(`${replicaReads} of ${reads} reads went to a replica`);
  // Replicas are read from: the checks are not so strict that everything goes to the primary.
  assert.ok(replicaReads > reads / 4, `${replicaReads} of ${reads} reads went to a replica`);
});

test('healthy replicas answer every read of a key that has not written lately, spread evenly over them', () => {
  fc.assert(
    fc.property(fc.integer({ min: 1, max: 500 }), fc.nat(10_000), (count, start) => {
      const now = 10_000 + start;
      const candidates = Array.from({ length: count }, (_, i) => ({
        until: now + 100,
        holds: now - 50,
        replayed: BigInt(1000 + i),
      }));
      const chosen = new Map<number, number>();
      const rounds = 3 * count;
      for (let turn = start; turn < start + rounds; turn++) {
        const index = chooseReplica(candidates, { wroteAt: now - 500, atLeast: 1000n }, now, turn);
        assert.ok(index >= 0);
        chosen.set(index, (chosen.get(index) ?? 0) + 1);
      }
      assert.equal(chosen.size, count);
      assert.deepEqual(new Set(chosen.values()), new Set([3]));
    }),
    { numRuns: 60 },
  );
});

test("a key that wrote after a replica's last catch-up, or a page read further on, is answered elsewhere", () => {
  const now = 5000;
  const replicas: Candidate[] = [
    { until: now + 10, holds: now - 300, replayed: 500n },
    { until: now + 10, holds: now - 100, replayed: 400n },
    LEFT_OUT,
  ];
  assert.equal(chooseReplica(replicas, { wroteAt: now - 200, atLeast: -1n }, now, 0), 1);
  assert.equal(chooseReplica(replicas, { wroteAt: now - 400, atLeast: 450n }, now, 1), 0);
  assert.equal(chooseReplica(replicas, { wroteAt: now - 50, atLeast: -1n }, now, 2), -1);
  assert.equal(chooseReplica(replicas, { wroteAt: -Infinity, atLeast: -1n }, now + 11, 3), -1);
});

test('in use, a replica stays so until its `until` on the same readings, and its lag stops growing while the primary is silent', () => {
  fc.assert(
    fc.property(
      fc.record({
        caughtUp: fc.integer({ min: 0, max: 5000 }),
        sinceCaughtUp: fc.integer({ min: 0, max: 2000 }),
        sincePrimary: fc.integer({ min: 0, max: 2000 }),
        sinceReplica: fc.integer({ min: 0, max: 2000 }),
        later: fc.integer({ min: 0, max: 3000 }),
        lagging: fc.boolean(),
      }),
      ({ caughtUp, sinceCaughtUp, sincePrimary, sinceReplica, later, lagging }) => {
        const primaryAt = caughtUp + sinceCaughtUp;
        const now = primaryAt + sincePrimary;
        const replicaAt = now - sinceReplica;
        const primary = { firstAnsweredAt: 0, answeredAt: primaryAt, failed: false, quietSince: undefined };
        const reading: ReplicaReading = {
          answeredAt: replicaAt,
          failed: false,
          recovering: true,
          paused: false,
          sameCluster: true,
          drained: true,
          caughtUpTo: caughtUp,
        };
        const was = lagging ? 'lagging' : 'in_use';
        const judged = judgeReplica(reading, primary, now, RULES, was);
        const lag = lagOf(reading, primary, now, RULES)!.lagMs;
        if (judged.inUse) {
          assert.ok(lag <= (lagging ? MAX_LAG_MS / 2 : MAX_LAG_MS));
          const at = Math.min(judged.until, now + later);
          assert.equal(
            judgeReplica(reading, primary, at, RULES).inUse,
            true,
            `left out at ${at}, before ${judged.until}`,
          );
        } else {
          assert.ok(judged.reason === 'lagging' || judged.reason === 'unreachable');
        }
        // Silent past RULES.silentMs, the primary's last answer stands for now.
        const silent = primaryAt + RULES.silentMs + 1 + later;
        assert.deepEqual(lagOf(reading, primary, silent, RULES), { lagMs: primaryAt - caughtUp, atLeast: false });
      },
    ),
  );
});

test('a replica is left out for the first reason that holds: unreachable, promoted, another cluster, paused, unmeasured, lagging', () => {
  const primary = { firstAnsweredAt: 500, answeredAt: 1000, failed: false, quietSince: undefined };
  const healthy: ReplicaReading = {
    answeredAt: 1000,
    failed: false,
    recovering: true,
    paused: false,
    sameCluster: true,
    drained: true,
    caughtUpTo: 990,
  };
  const reason = (change: Partial<ReplicaReading>, now = 1000) => {
    const judged = judgeReplica({ ...healthy, ...change }, primary, now, RULES);
    return judged.inUse ? 'in_use' : judged.reason;
  };
  assert.equal(reason({}), 'in_use');
  assert.equal(reason({ failed: true, recovering: false }), 'unreachable');
  assert.equal(reason({}, 1000 + RULES.silentMs + 1), 'unreachable');
  assert.equal(reason({ recovering: false, paused: true }), 'promoted');
  assert.equal(reason({ sameCluster: false, paused: true }), 'other_cluster');
  assert.equal(reason({ paused: true, caughtUpTo: undefined }), 'paused');
  assert.equal(reason({ caughtUpTo: undefined }), 'unmeasured');
  // Its first check not ended yet, when another server's did: not judged unreachable yet.
  assert.equal(judgeReplica(UNCHECKED, primary, 1000, RULES).inUse, false);
  assert.equal((judgeReplica(UNCHECKED, primary, 1000, RULES) as { reason: string }).reason, 'unmeasured');
  // Behind even the first sample (taken at 500), for longer than the bound: lagging.
  const later = { ...primary, answeredAt: 1500 };
  const behind = { ...healthy, answeredAt: 1500, caughtUpTo: undefined };
  assert.deepEqual(judgeReplica(behind, later, 500 + MAX_LAG_MS + 1, RULES), {
    inUse: false,
    reason: 'lagging',
    lagMs: MAX_LAG_MS + 1,
  });
  assert.equal(judgeReplica(behind, later, 500 + MAX_LAG_MS, RULES).inUse, false);
  assert.equal((judgeReplica(behind, later, 500 + MAX_LAG_MS, RULES) as { reason: string }).reason, 'unmeasured');
  assert.equal(reason({ caughtUpTo: 1000 - MAX_LAG_MS - 1 }), 'lagging');
  assert.equal(reason({ caughtUpTo: 1000 - MAX_LAG_MS }), 'in_use');
});

test('with the primary quiet, a replica found since to have replayed all it received holds every write acknowledged before', () => {
  // The primary answered at 1000, refused the check asked at 1100; the replica last caught up at 990.
  const quiet: PrimaryReading = { firstAnsweredAt: 0, answeredAt: 1000, failed: true, quietSince: 1100 };
  const replica: ReplicaReading = { ...UNCHECKED, answeredAt: 1150, drained: true, caughtUpTo: 990 };
  const holds = (reading: ReplicaReading, primary = quiet) => {
    const judged = judgeReplica(reading, primary, 1200, RULES);
    assert.ok(judged.inUse);
    return judged.holds;
  };
  assert.equal(holds(replica), 1100);
  // Still replaying what it received, or last found drained before the primary went quiet: what it caught up to.
  assert.equal(holds({ ...replica, drained: false }), 990);
  assert.equal(holds({ ...replica, answeredAt: 1090 }), 990);
  // The primary answering: its samples alone say.
  assert.equal(holds(replica, { ...quiet, answeredAt: 1150, failed: false, quietSince: undefined }), 990);
  const candidate = candidateOf(judgeReplica(replica, quiet, 1200, RULES), 7n);
  assert.equal(chooseReplica([candidate], { wroteAt: 1050, atLeast: -1n }, 1200, 0), 0, 'a create made before');
  assert.equal(chooseReplica([candidate], { wroteAt: 1100, atLeast: -1n }, 1200, 0), -1, 'one made since');
});

test('caughtUpTo is the newest sample the replayed position covers', () => {
  fc.assert(
    fc.property(fc.array(fc.nat(1000), { maxLength: 50 }), fc.nat(60_000), (steps, replayed) => {
      let lsn = 0;
      const samples = steps.map((step, at) => ({ at: at * 100, lsn: BigInt((lsn += step)) }));
      const found = caughtUpTo(samples, BigInt(replayed));
      const expected = samples.filter((sample) => sample.lsn <= BigInt(replayed)).at(-1)?.at;
      assert.equal(found, expected);
    }),
  );
});
