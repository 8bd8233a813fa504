import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { addressGroup } from '../src/http/addresses.js';
import {
  decideAdmission,
  holdOf,
  isDoneLeaving,
  pickToGiveUp,
  QUIET_MS,
  SlotTable,
  spareSlots,
  type SlotRecord,
} from '../src/http/slot-policy.js';

/**
 * One simulated connection: the slot policy's record, and what the client is doing on it. A
 * request in progress is one being received (`partial`), answered or waiting behind that.
 */
interface Sim extends SlotRecord {
  id: number;
  /** What its client does: sends nothing, one request, requests again and again, or begins one and stops. */
  behaviour: 'silent' | 'idle' | 'busy' | 'stalled';
  partial: boolean;
  /** It sent a whole request once. */
  requested: boolean;
  /** Giving up its slot: closed once its answers are made (or at once when it has none to make). */
  closeAfterAnswers: boolean;
  closeNext: boolean;
}

const inProgress = (c: Sim) => c.answering || c.waiting > 0 || c.partial || c.queued > 0;

/**
 * One tick of the clients: time passes (a look), some answers are made, some clients send a
 * request or the start of one, some close, then new connections open: `opens` times half of
 * max + spare, all of one behaviour (`mix` 0 to 3) or of every kind (4), from the groups of
 * connections already open (`skew`: large groups the likelier) or from the whole population.
 */
interface Step {
  ms: number;
  answer: number;
  request: number;
  partial: number;
  close: number;
  opens: number;
  skew: number;
  mix: number;
  pick: number;
  /** Connections accepted in one turn of the event loop. */
  burst: number;
}

/** A population of `groups` clients' address groups: distinct IPv4 addresses, or IPv6 /64s (two addresses each). */
function groupKeys(groups: number, family: 'ipv4' | 'ipv6' | 'proxy'): (i: number, n: number) => string {
  if (family === 'ipv4') return (i) => addressGroup(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`);
  if (family === 'ipv6') {
    return (i, n) => addressGroup(`2001:db8:${(i >> 16).toString(16)}:${(i & 0xffff).toString(16)}::${(n % 2) + 1}`);
  }
  // Behind a trusted proxy each connection is a group of its own (src/http/connections.ts).
  return (i, n) => (i % 4 === 0 ? `192.0.2.1#${n}` : addressGroup(`10.0.${(i >> 8) & 255}.${i & 255}`));
}

/**
 * Drives the policy the way src/http/connections.ts applies it, through `steps`, and checks
 * the rule's invariants (docs/hardening.md#connections) after each step against a brute-force count.
 */
function run(
  max: number,
  groups: number,
  family: 'ipv4' | 'ipv6' | 'proxy',
  perAddress: number | undefined,
  steps: Step[],
  seen: Record<string, number> = {},
) {
  const saw = (what: string) => (seen[what] = (seen[what] ?? 0) + 1);
  const spare = spareSlots(max);
  const table = new SlotTable<Sim>({ max, spare, perAddress });
  const keyOf = groupKeys(groups, family);
  let now = 1_000;
  let serial = 0;
  // The simulation's own count, kept apart from the table's: open connections, by group, and
  // the slots each group holds (its connections not leaving).
  const opened = new Set<Sim>();
  const byGroup = new Map<string, Set<Sim>>();
  const held = new Map<string, number>();
  const hold = (group: string, by: number) => {
    const size = (held.get(group) ?? 0) + by;
    if (size > 0) held.set(group, size);
    else held.delete(group);
  };
  const mostHeld = (except?: string) => {
    let most = 0;
    for (const [group, size] of held) if (group !== except && size > most) most = size;
    return most;
  };
  const leaving = new Set<Sim>();
  const leave = (c: Sim) => {
    assert.equal(c.leaving, true);
    leaving.add(c);
    hold(c.group, -1);
  };
  const forget = (c: Sim) => {
    opened.delete(c);
    byGroup.get(c.group)!.delete(c);
    if (c.leaving) leaving.delete(c);
    else hold(c.group, -1);
    assert.ok(table.remove(c));
  };
  const closeNow = (c: Sim, why: string) => {
    assert.ok(!inProgress(c), `${why}: a request in progress was cut off`);
    forget(c);
  };
  const look = () => {
    for (const c of opened) {
      if (c.read !== c.readAtLook) {
        c.readAtLook = c.read;
        c.changedAt = now;
      }
    }
  };

  // makeRoom: done-leaving ones closed, then what is owed given up, each from a largest group.
  const makeRoom = (newcomers: Iterable<string> = []) => {
    for (const c of leaving) {
      if (isDoneLeaving(c, now) && !c.closeAfterAnswers) {
        saw('done leaving');
        closeNow(c, 'done leaving');
      }
    }
    const groupsHolding = held.size;
    const mine = Math.max(0, ...[...newcomers].map((group) => held.get(group) ?? 0));
    for (const { record, hold: kind } of table.chooseToGiveUp(now)) {
      const size = held.get(record.group) ?? 0;
      assert.equal(size, mostHeld(), `given up by a group holding ${size}, not the most (${mostHeld()})`);
      // A group at or under its even share is never reduced by a newcomer of a larger group.
      if (mine > 0) {
        assert.ok(
          !(size <= max / groupsHolding && mine > size),
          `a group at its share (${size}) reduced for one of ${mine}`,
        );
      }
      // Silent, else idle, else busy: of the connections of the groups holding the most (looked
      // at where they are a few hundred, which the smaller populations give: the rule is the same).
      const peers = kind === 'silent' ? [] : [...held].filter(([, n]) => n === size);
      if (peers.length * size <= 256) {
        const better = peers
          .flatMap(([group]) => [...byGroup.get(group)!])
          .filter((c) => !c.leaving && (holdOf(c, now) === 'silent' || (kind === 'busy' && holdOf(c, now) === 'idle')));
        assert.deepEqual(better, [], `a ${kind} connection given up while a largest group had a better one`);
      }
      leave(record);
      saw(`given up ${kind}`);
      assert.equal(kind, holdOf(record, now));
      if (kind === 'busy') {
        // Closed after the answers to what it received; between two requests, after its next.
        if (inProgress(record)) record.closeAfterAnswers = true;
        else record.closeNext = true;
      } else {
        closeNow(record, kind);
      }
    }
    // Whatever is still owed, the largest groups have nothing to give up yet.
    if (table.owed() > 0) {
      const most = mostHeld();
      const largest = [...held].filter(([, size]) => size === most).flatMap(([group]) => [...byGroup.get(group)!]);
      assert.equal(pickToGiveUp(largest, now), undefined, 'a slot owed while a largest group had one to give up');
    }
  };

  const behaviours = ['silent', 'idle', 'busy', 'stalled'] as const;
  const openOne = (group: string, behaviour: Sim['behaviour']) => {
    // node:http refuses these itself (server.maxConnections), before the policy is asked.
    if (opened.size >= max + spare) return saw('refused server_full');
    const mine = byGroup.get(group) ?? new Set<Sim>();
    const holding = held.get(group) ?? 0;
    const live = [...mine].filter((c) => !c.leaving);
    const silent = live.some((c) => holdOf(c, now) === 'silent');
    const idle = live.some((c) => holdOf(c, now) === 'idle');
    const full = opened.size - leaving.size >= max;
    const decision = decideAdmission(table.admissionFacts(group, now));
    if (full) {
      saw(`no slot free, ${decision.admit ? 'let in' : 'refused'}`);
      if (holding + 1 > mostHeld(group))
        saw(`would hold the most: ${silent ? 'silent' : idle ? 'idle' : 'nothing'} to give up`);
    } else if (opened.size >= max) {
      saw('a slot free while some leave');
    }
    if (!decision.admit) {
      saw(`refused ${decision.reason}`);
      // Refused only in the cases the contract allows, and never a group that holds nothing
      // while the slots are held by others (only when every slot, the spare ones too, is taken).
      assert.notEqual(decision.reason, 'server_full', 'refused for want of a spare slot while one was free');
      if (decision.reason === 'address_cap') assert.ok(perAddress !== undefined && mine.size >= perAddress && !silent);
      else {
        assert.ok(full, 'refused while a slot was free');
        assert.ok(
          holding + 1 > mostHeld(group),
          `refused a group that would hold ${holding + 1}, not more than another's ${mostHeld(group)}`,
        );
        assert.ok(!silent && !idle, 'refused a group with a connection to give up at once');
        assert.ok(holding > 0, 'refused a group that held nothing');
      }
      return;
    }
    assert.ok(opened.size < max + spare, 'more than max + spare open');
    const c: Sim = {
      id: serial++,
      behaviour,
      group,
      openedAt: now,
      read: 0,
      readAtLook: -1,
      changedAt: now,
      readWhole: 0,
      answering: false,
      waiting: 0,
      queued: 0,
      leaving: false,
      partial: false,
      requested: false,
      closeAfterAnswers: false,
      closeNext: false,
    };
    opened.add(c);
    if (!byGroup.has(group)) byGroup.set(group, mine);
    mine.add(c);
    hold(group, 1);
    table.add(c);
    // Its client's first bytes, at once: a request, or the start of one.
    if (behaviour === 'stalled') request(c, 10, true);
    else if (behaviour !== 'silent') request(c, 40, false);
    if (decision.closeSilent) {
      const victim = live.find((other) => holdOf(other, now) === 'silent')!;
      table.markLeaving(victim);
      leave(victim);
      closeNow(victim, 'silent at the cap');
    }
  };

  // A request arrives (`partial`: its start only), behind the answer in progress if any.
  const request = (c: Sim, bytes: number, partial: boolean) => {
    c.read += bytes;
    if (partial) {
      c.partial = true;
      return;
    }
    c.partial = false;
    if (c.answering) c.waiting++;
    else c.answering = true;
    c.readWhole = c.read;
    c.requested = true;
    if (c.closeNext) c.closeAfterAnswers = true;
  };

  // A busy connection giving up its slot closes after its last answer.
  const answered = (c: Sim) => {
    if ((c.closeAfterAnswers || c.closeNext) && !inProgress(c)) forget(c);
  };

  for (const step of steps) {
    const some = (share: number) => [...opened].filter((c, i) => ((i * 7919 + step.pick) % 1000) / 1000 < share);
    now += step.ms;
    look();
    if (table.owed() > 0 || table.leaving > 0) makeRoom();
    for (const c of some(step.answer)) {
      // Every answer it owes, one after another.
      if (!c.answering) continue;
      c.waiting = 0;
      c.answering = false;
      answered(c);
    }
    for (const c of some(step.request)) {
      if (c.behaviour === 'silent' || (c.behaviour === 'idle' && c.requested)) continue;
      // Its reading stopped: only a request it was receiving arrives whole.
      if (c.closeAfterAnswers && !c.partial) continue;
      if (c.behaviour !== 'stalled') request(c, 40, false);
    }
    for (const c of some(step.partial)) {
      if (c.behaviour === 'silent' || c.closeAfterAnswers || c.answering || c.partial) continue;
      request(c, 10, true);
    }
    for (const c of some(step.close)) if (opened.has(c)) forget(c);
    const live = [...opened];
    if (process.env.DBG) {
      const holds: Record<string, number> = {};
      for (const c of opened) if (!c.leaving) holds[holdOf(c, now)] = (holds[holdOf(c, now)] ?? 0) + 1;
      console.log('open', max, opened.size, Math.round((step.opens * (max + spare)) / 2), JSON.stringify(holds));
    }
    const count = Math.round((step.opens * (max + spare)) / 2);
    // Connections accepted in one turn of the event loop are admitted one by one; room is made
    // after the turn (connections.ts: makeRoomSoon).
    let turn = new Set<string>();
    const endTurn = () => {
      if (table.owed() > 0) makeRoom(turn);
      turn = new Set();
    };
    for (let n = 0; n < count; n++) {
      const behaviour = behaviours[(step.mix === 4 ? n + step.pick : step.mix) % behaviours.length]!;
      const from = live[(step.pick + n * 7919) % Math.max(1, live.length)];
      const group =
        from !== undefined && ((n * 7919 + step.pick) % 1000) / 1000 < step.skew
          ? from.group
          : keyOf((step.pick + n * 7919) % groups, serial);
      openOne(group, behaviour);
      turn.add(group);
      if (turn.size >= step.burst) endTurn();
    }
    endTurn();
    assert.equal(table.open, opened.size);
    assert.ok(table.open <= max + spare, `${table.open} open, over ${max} + ${spare}`);
    assert.equal(table.leaving, leaving.size);
    for (const [group, size] of held) assert.equal(table.heldBy(group), size);
    const most = mostHeld();
    assert.equal(table.othersMost(''), most);
    const largest = [...held].find(([, size]) => size === most)?.[0];
    if (largest !== undefined) assert.equal(table.othersMost(largest), mostHeld(largest));
  }
  return table;
}

const share = fc.double({ min: 0, max: 1, noNaN: true });
const step: fc.Arbitrary<Step> = fc.record({
  ms: fc.integer({ min: 0, max: 2 * QUIET_MS }),
  answer: share,
  request: share,
  partial: fc.double({ min: 0, max: 0.2, noNaN: true }),
  close: fc.double({ min: 0, max: 0.2, noNaN: true }),
  opens: fc.constantFrom(0, 0, 0.02, 0.1, 0.5, 1, 2),
  skew: share,
  mix: fc.nat(4),
  pick: fc.nat(999),
  burst: fc.constantFrom(1, 8, 64, 1_000_000),
});

test('the slot policy keeps the contract’s rule through random opens, requests, answers, idleness and closes, for 1 to 10,000 groups and 4 to 4,096 slots', () => {
  const seen: Record<string, number> = {};
  fc.assert(
    fc.property(
      fc.integer({ min: 4, max: 4096 }),
      fc.integer({ min: 1, max: 10_000 }),
      fc.constantFrom('ipv4' as const, 'ipv6' as const, 'proxy' as const),
      fc.oneof(
        { arbitrary: fc.constant(undefined), weight: 4 },
        { arbitrary: fc.integer({ min: 1, max: 64 }), weight: 1 },
      ),
      fc.array(step, { minLength: 1, maxLength: 40, size: 'max' }),
      (max, groups, family, perAddress, steps) => void run(max, groups, family, perAddress, steps, seen),
    ),
    // A fixed seed: the runs below meet every case the rule tells apart (checked after them), and
    // a failure names the run that shows it, the same every time.
    { numRuns: 80, seed: 20261202 },
  );
  // The runs met every case the rule tells apart: a change that breaks one cannot pass unseen.
  for (const what of [
    'no slot free, let in',
    'no slot free, refused',
    'a slot free while some leave',
    'would hold the most: silent to give up',
    'would hold the most: idle to give up',
    'would hold the most: nothing to give up',
    'refused address_full',
    'refused address_cap',
    'refused server_full',
    'given up silent',
    'given up idle',
    'given up busy',
    'done leaving',
  ]) {
    assert.ok((seen[what] ?? 0) > 0, `no run met: ${what} (${JSON.stringify(seen)})`);
  }
});

test('a crowd as large as the slots, one connection each, never keeps a newcomer out: 16 × 16 and 1,100 × 1,024, silent, idle and busy', () => {
  for (const [groups, max] of [
    [16, 16],
    [1_100, 1_024],
    [10_000, 4_096],
  ] as const) {
    for (const how of ['silent', 'idle', 'busy'] as const) {
      const quiet = { answer: 0, request: 0, partial: 0, close: 0, opens: 0, skew: 0, mix: 0, pick: 0, burst: 16 };
      // Every group's one connection: more of them than slots, for 1,100 and 10,000.
      const steps: Step[] = [
        {
          ...quiet,
          ms: 0,
          opens: (2 * groups) / (max + spareSlots(max)),
          mix: ['silent', 'idle', 'busy'].indexOf(how),
        },
      ];
      // Idle: answered, then quiet. Busy: answered, and asking again at once.
      if (how !== 'silent') steps.push({ ...quiet, ms: 0, answer: 1, request: how === 'busy' ? 1 : 0 });
      steps.push({ ...quiet, ms: QUIET_MS }, { ...quiet, ms: QUIET_MS });
      const table = run(max, groups, 'ipv4', undefined, steps);
      // Newcomers from groups that hold nothing, one after another: each is let in, and for
      // silent and idle crowds a slot is given up at once.
      for (let i = 0; i < 50; i++) {
        const group = `198.51.100.${i}`;
        const admission = decideAdmission(table.admissionFacts(group, 10_000));
        assert.deepEqual(admission, { admit: true }, `${how}: newcomer ${i} of ${groups} groups, ${max} slots`);
      }
    }
  }
});

test('with no slot free, a group that would hold more than any other is let in only in place of its own silent or idle connection', () => {
  const base = {
    max: 4,
    spare: 4,
    perAddress: undefined,
    open: 4,
    leaving: 0,
    groupOpen: 2,
    groupHeld: 2,
    othersMost: 1,
  };
  assert.deepEqual(decideAdmission({ ...base, groupSilent: false, groupIdle: false }), {
    admit: false,
    reason: 'address_full',
  });
  assert.deepEqual(decideAdmission({ ...base, groupSilent: false, groupIdle: true }), { admit: true });
  assert.deepEqual(decideAdmission({ ...base, groupSilent: true, groupIdle: false }), { admit: true });
  // Tied with another group: let in, and a largest group gives one up.
  assert.deepEqual(decideAdmission({ ...base, othersMost: 3, groupSilent: false, groupIdle: false }), { admit: true });
  // A slot free: let in whatever it holds.
  assert.deepEqual(decideAdmission({ ...base, leaving: 1, groupSilent: false, groupIdle: false }), { admit: true });
  // The spare slots taken too.
  assert.deepEqual(
    decideAdmission({ ...base, open: 8, groupHeld: 0, groupOpen: 0, groupSilent: false, groupIdle: false }),
    {
      admit: false,
      reason: 'server_full',
    },
  );
  // The hard cap: its silent connection gives way, or it is refused under its own reason.
  const capped = { ...base, open: 2, perAddress: 2, groupIdle: false };
  assert.deepEqual(decideAdmission({ ...capped, groupSilent: true }), { admit: true, closeSilent: true });
  assert.deepEqual(decideAdmission({ ...capped, groupSilent: false }), { admit: false, reason: 'address_cap' });
});

test('what a connection can give up: silent after QUIET_MS with nothing read at a look, idle a half-look after its last byte, fresh kept', () => {
  const record = (over: Partial<SlotRecord>): SlotRecord => ({
    group: 'g',
    openedAt: 0,
    read: 0,
    readAtLook: 0,
    changedAt: 0,
    readWhole: 0,
    answering: false,
    waiting: 0,
    queued: 0,
    leaving: false,
    ...over,
  });
  assert.equal(holdOf(record({}), QUIET_MS - 1), 'fresh');
  assert.equal(holdOf(record({}), QUIET_MS), 'silent');
  // No look has seen it yet: a request may be in the kernel's buffer.
  assert.equal(holdOf(record({ readAtLook: -1 }), QUIET_MS * 10), 'fresh');
  const between = record({ read: 40, readAtLook: 40, changedAt: 100, readWhole: 40 });
  assert.equal(holdOf(between, 100 + QUIET_MS / 2 - 1), 'busy');
  assert.equal(holdOf(between, 100 + QUIET_MS / 2), 'idle');
  assert.equal(holdOf({ ...between, read: 80 }, 1_000), 'busy', 'read since the last look');
  assert.equal(holdOf({ ...between, queued: 1 }, 1_000), 'busy', 'answers still queued');
  assert.equal(holdOf({ ...between, answering: true }, 1_000), 'busy');
  assert.equal(holdOf(record({ read: 10, readAtLook: 10 }), 1_000), 'busy', 'a request begun, never answered');
  assert.equal(holdOf({ ...between, read: 50, readAtLook: 50 }, 1_000), 'busy', 'the next request begun, and stopped');
  // Of several: the oldest silent, else the first idle, else the busy one that frees its slot soonest.
  const busyWaiting = record({ read: 40, readWhole: 40, answering: true, waiting: 3 });
  const busyAlone = record({ read: 40, readWhole: 40, answering: true });
  const busyBetween = record({ read: 80, readAtLook: 40, readWhole: 40 });
  assert.equal(pickToGiveUp([busyBetween, busyWaiting, busyAlone], 1_000)?.record, busyAlone);
  const silent = record({});
  assert.equal(pickToGiveUp([busyAlone, between, silent], 1_000)?.record, silent);
  assert.equal(pickToGiveUp([busyAlone, between], 1_000)?.record, between);
  assert.equal(pickToGiveUp([record({ openedAt: 900 }), record({ leaving: true })], 1_000), undefined);
});
