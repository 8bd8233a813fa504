import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { clockFloorAt, formatEventId, IDS_PER_MS, parseEventId } from '../src/events/ids.js';

const INT64_MAX = 2n ** 63n - 1n;

test('event ids are evt_ and 32 hex digits that read back as the position they were made from', () => {
  for (const position of [
    { tx: 0n, seq: 1n },
    { tx: 0n, seq: 42n },
    { tx: 1522n, seq: INT64_MAX },
    { tx: 2n ** 64n - 1n, seq: 7n },
  ]) {
    const id = formatEventId(position);
    assert.match(id, /^evt_[0-9a-f]{32}$/);
    assert.deepEqual(parseEventId(id), position);
  }
  assert.equal(formatEventId({ tx: 0n, seq: 42n }), 'evt_0000000000000000000000000000002a');
});

test('ids compare as strings in position order: transaction first, then sequence number', () => {
  const positions = [
    { tx: 0n, seq: 9n },
    { tx: 0n, seq: 10n },
    { tx: 0n, seq: 255n },
    { tx: 1n, seq: 1n },
    { tx: 16n, seq: 0n },
    { tx: 2n ** 40n, seq: 3n },
  ];
  const ids = positions.map(formatEventId);
  assert.deepEqual([...ids].sort(), ids);
});

test('text that is no event id reads as none', () => {
  const id = formatEventId({ tx: 3n, seq: 4n });
  for (const text of [
    '',
    'evt_',
    id.toUpperCase(),
    id.replace('evt_', 'EVT_'),
    `${id}0`,
    id.slice(0, -1),
    ` ${id}`,
    // A sequence number past int64: no event has it.
    `evt_${'0'.repeat(16)}8000000000000000`,
  ]) {
    assert.equal(parseEventId(text), undefined, text);
  }
});

type Step =
  | { kind: 'write'; ms: number; share: number }
  | { kind: 'copy' }
  | { kind: 'restore'; ms: number; copy: number; replacedGone: boolean };

const steps: fc.Arbitrary<Step[]> = fc.array(
  fc.oneof(
    fc.record({
      kind: fc.constant('write' as const),
      ms: fc.integer({ min: 1, max: 100_000 }),
      share: fc.double({ min: 0, max: 1, noNaN: true }),
    }),
    fc.record({ kind: fc.constant('copy' as const) }),
    fc.record({
      kind: fc.constant('restore' as const),
      ms: fc.integer({ min: 1, max: 100_000 }),
      copy: fc.nat(),
      replacedGone: fc.boolean(),
    }),
  ),
  { maxLength: 60 },
);

test('a counter moved to the clock floor when restored from any older copy gives out no id given before', () => {
  fc.assert(
    fc.property(fc.integer({ min: 0, max: Date.UTC(2200, 0, 1) }), steps, (start, history) => {
      // One database's life: ids given out at any pace below IDS_PER_MS a millisecond, copies
      // taken, copies restored (the database replaced still there, or gone), as backup.ts and
      // postgres-event-clock.ts move the counter: to at least the replaced one's and the floor.
      let now = start;
      let counter = 0n;
      let given = 0n;
      const copies: bigint[] = [];
      for (const step of history) {
        if (step.kind === 'copy') {
          copies.push(counter);
          continue;
        }
        now += step.ms;
        if (step.kind === 'write') {
          counter += BigInt(Math.floor(step.share * (step.ms * Number(IDS_PER_MS) - 1)));
          if (counter > given) given = counter;
          continue;
        }
        if (copies.length === 0) continue;
        const copy = copies[step.copy % copies.length]!;
        const floor = clockFloorAt(now) - 1n;
        counter = [copy, step.replacedGone ? 0n : counter, floor].reduce((a, b) => (a > b ? a : b));
        // The next id is counter + 1.
        assert.ok(counter >= given, `restored at ${now}: ${counter} < ${given}`);
      }
      assert.ok(counter < 2n ** 63n, 'within int64');
    }),
  );
});

test('clock floors are whole milliseconds apart, and ids at them sort after every id before', () => {
  const at = Date.UTC(2026, 10, 22, 10);
  assert.equal(clockFloorAt(at + 1) - clockFloorAt(at), IDS_PER_MS);
  assert.equal(clockFloorAt(at + 0.9), clockFloorAt(at));
  const before = formatEventId({ tx: 0n, seq: 2n ** 40n });
  assert.ok(formatEventId({ tx: 0n, seq: clockFloorAt(at) }) > before);
  assert.ok(formatEventId({ tx: clockFloorAt(at), seq: 1n }) > formatEventId({ tx: 2n ** 40n, seq: 2n ** 62n }));
});
