import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { runKeysCommand } from '../src/cli/keys.js';
import { hashKey, keyHint, makeKey } from '../src/keys/keys.js';
import type { Store } from '../src/store/store.js';
import { tempSqliteStore } from './helpers.js';

// What a terminal acts on: C0 and C1 controls, DEL, the line separators, the bidirectional
// controls, and lone surrogates.
const TERMINAL_CONTROLS =
  // eslint-disable-next-line no-control-regex -- finding control characters is the point
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** Names an older version stored without the name rule: each one would drive a terminal. */
const HOSTILE = [
  '\u001b[2K\rowned',
  '\u001b]52;c;cm0gLXJmIH4=\u0007clipboard',
  'tab\there',
  'csi\u009b31mred',
  'del\u007f',
  'right\u202eto left',
  'isolate\u2066x\u2069',
  'line\u2028break',
];

async function keysCli(t: TestContext) {
  const { store } = await tempSqliteStore(t);
  const now = new Date(Date.UTC(2026, 10, 22, 12));
  const run = async (...args: string[]) => {
    const out: string[] = [];
    const err: string[] = [];
    const code = await runKeysCommand(args, {
      io: { out: (line) => void out.push(line), err: (line) => void err.push(line) },
      withStore: (use) => use(store),
      now: () => now,
    });
    return { code, stdout: out.join('\n'), stderr: err.join('\n') };
  };
  return { store, run, now };
}

/** Stores a key the way a version without the name rule did: straight into the store. */
async function storeOldKey(store: Store, name: string, createdAt: Date) {
  const key = makeKey();
  return store.createKey({ name, hint: keyHint(key), hash: hashKey(key), createdAt });
}

test('keys create refuses a name with a control character, naming it by code point, and stores nothing', async (t) => {
  const { store, run } = await keysCli(t);
  const cases: [string, RegExp][] = [
    ['\u001b[2K\rwiped', /it holds U\+001B \(character 1\)$/m],
    ['copy\u001b]52;c;aGk=\u0007', /it holds U\+001B \(character 5\)$/m],
    ['a\rb', /it holds U\+000D \(character 2\)$/m],
    ['tab\t', /it holds U\+0009 \(character 4\)$/m],
    ['del\u007f', /it holds U\+007F/],
    ['csi\u009b31m', /it holds U\+009B/],
    ['lone\ud800', /it holds U\+D800 \(character 5\)$/m],
    ['', /it has 0 characters$/m],
    ['   ', /it is only white space$/m],
    ['\u3000\u00a0', /it is only white space$/m],
    ['x'.repeat(256), /it has 256 characters$/m],
  ];
  for (const [name, reason] of cases) {
    const { code, stdout, stderr } = await run('create', '--name', name);
    assert.equal(code, 2, JSON.stringify(name));
    assert.equal(stdout, '', 'no key printed');
    const [first] = stderr.split('\n');
    assert.match(first!, /^petstore: --name must be 1 to 255 characters, not only white space, with no control/);
    assert.match(first!, reason, JSON.stringify(name));
    assert.doesNotMatch(
      stderr.replaceAll('\n', ''),
      TERMINAL_CONTROLS,
      'the refusal prints no other control character',
    );
  }
  assert.deepEqual(await store.listKeys(), []);
});

test('keys create keeps a name of 255 characters exactly as given, and shows a bidirectional control by code point', async (t) => {
  const { store, run } = await keysCli(t);
  const long = '🐕'.repeat(255);
  const names = [long, '  spaced  ', 'right\u202eto left'];
  for (const name of names) {
    const created = await run('create', '--name', name);
    assert.equal(created.code, 0, created.stderr);
    assert.doesNotMatch(created.stderr, TERMINAL_CONTROLS);
  }
  assert.deepEqual(
    (await store.listKeys()).map((key) => key.name),
    names,
  );
  const note = await run('create', '--name', 'a\u2067b');
  assert.match(note.stderr, /^Created key 4 \(aU\+2067b; /);
  const json = await run('create', '--name', 'c\u202ad', '--json');
  assert.doesNotMatch(json.stdout, TERMINAL_CONTROLS);
  assert.equal((JSON.parse(json.stdout) as { name: string }).name, 'c\u202ad');
});

test('keys list shows the names an older version stored by code point, in the table and the JSON', async (t) => {
  const { store, run, now } = await keysCli(t);
  for (const name of HOSTILE) await storeOldKey(store, name, now);
  const table = await run('list');
  assert.equal(table.code, 0, table.stderr);
  const lines = table.stdout.split('\n');
  assert.equal(lines.length, HOSTILE.length + 1, 'one line per key, and the header');
  for (const [i, line] of lines.slice(1).entries()) {
    const fields = line.split('\t');
    assert.equal(fields.length, 9, line);
    assert.doesNotMatch(fields[1]!, TERMINAL_CONTROLS, line);
    // Each control character becomes its code point; everything else is as stored.
    const shown = [...HOSTILE[i]!]
      .map((c) =>
        TERMINAL_CONTROLS.test(c) ? `U+${c.codePointAt(0)!.toString(16).toUpperCase().padStart(4, '0')}` : c,
      )
      .join('');
    assert.equal(fields[1], shown);
  }
  assert.match(table.stdout, /\tU\+001B\[2KU\+000Downed\t/);

  const json = await run('list', '--json');
  assert.equal(json.code, 0, json.stderr);
  assert.doesNotMatch(json.stdout.replaceAll('\n', ''), TERMINAL_CONTROLS);
  const listed = json.stdout.split('\n').map((line) => (JSON.parse(line) as { name: string }).name);
  assert.deepEqual(listed, HOSTILE, 'the JSON carries each name exactly');
});

test('keys roll copies an old name and prints it by code point', async (t) => {
  const { store, run, now } = await keysCli(t);
  const old = await storeOldKey(store, HOSTILE[0]!, now);
  const rolled = await run('roll', String(old.id));
  assert.equal(rolled.code, 0, rolled.stderr);
  assert.match(rolled.stderr, /^Created key 2 \(U\+001B\[2KU\+000Downed; /);
  assert.doesNotMatch(rolled.stderr.replaceAll('\n', ''), TERMINAL_CONTROLS);
  const successor = (await store.listKeys()).find((key) => key.id === 2);
  assert.equal(successor?.name, HOSTILE[0], 'the successor keeps the name as stored');

  const second = await storeOldKey(store, HOSTILE[5]!, now);
  const json = await run('roll', String(second.id), '--json');
  assert.equal(json.code, 0, json.stderr);
  assert.doesNotMatch(json.stdout, TERMINAL_CONTROLS);
  assert.equal((JSON.parse(json.stdout) as { name: string }).name, HOSTILE[5]);
});
