import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatEventId, parseEventId } from '../src/events/ids.js';

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
