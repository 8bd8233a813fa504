import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { pino } from 'pino';
import {
  CHECKED_SONIC_BOOM,
  rememberTailLength,
  sonicBoomVersion,
  standardOutput,
  type Destination as PinoDestination,
} from '../src/http/log-stream.js';

/** What these tests read of sonic-boom: the chunks waiting, and their bound. */
type Destination = PinoDestination & { _bufs: string[]; maxWrite: number };

/** pino's asynchronous destination on a new file, once the file is open. */
async function fileDestination(t: TestContext, name: string): Promise<{ destination: Destination; path: string }> {
  const folder = mkdtempSync(join(tmpdir(), 'petstore-log-'));
  t.after(() => rmSync(folder, { recursive: true, force: true }));
  const path = join(folder, name);
  const destination = pino.destination({ dest: path }) as Destination;
  await once(destination, 'ready');
  return { destination, path };
}

/** Lines of many lengths, some with characters of two, three and four UTF-8 bytes. */
const lines = Array.from(
  { length: 3000 },
  (_, i) => `{"i":${i},"msg":"${'é🐈猫x'.repeat(i % 7)}${'a'.repeat((i * 37) % 900)}"}\n`,
);

async function close(destination: Destination) {
  destination.end();
  await once(destination, 'close');
}

/** Lines of exactly 1 KiB: sixteen fill a chunk to sonic-boom's maxWrite (16 KiB), not one byte over. */
const kibLines = Array.from({ length: 100 }, (_, i) => `${String(i).padStart(4, '0')}${'k'.repeat(1019)}\n`);

for (const [name, given] of [
  ['lines of many lengths and characters', lines],
  ['lines that fill a chunk to the byte', kibLines],
] as const) {
  test(`the remembered chunk length chunks ${name} exactly as sonic-boom does, and writes the same bytes`, async (t) => {
    const plain = await fileDestination(t, 'plain.log');
    const remembering = await fileDestination(t, 'remembering.log');
    rememberTailLength(remembering.destination);
    assert.notEqual(remembering.destination.write, plain.destination.write);
    for (const [i, line] of given.entries()) {
      plain.destination.write(line);
      remembering.destination.write(line);
      // sonic-boom's flush puts an empty chunk in the queue when it is empty: a chunk not filled by write.
      if (i % 1000 === 500) {
        plain.destination.flush();
        remembering.destination.flush();
      }
    }
    // Written in one turn, every line but the first write's waits in the queue, in the same chunks.
    const chunks = (destination: Destination) => destination._bufs.map((chunk) => Buffer.byteLength(chunk));
    assert.ok(plain.destination._bufs.length > 5);
    assert.deepEqual(chunks(remembering.destination), chunks(plain.destination), 'chunk sizes in bytes');
    assert.ok(
      remembering.destination._bufs.every((chunk, i) => chunk === plain.destination._bufs[i]),
      'chunk contents',
    );
    assert.ok(
      Math.max(...chunks(remembering.destination)) <= remembering.destination.maxWrite,
      'a chunk over maxWrite',
    );
    await Promise.all([close(plain.destination), close(remembering.destination)]);
    const expected = given.join('');
    assert.ok(readFileSync(plain.path, 'utf8') === expected, 'sonic-boom wrote other bytes than given');
    assert.ok(readFileSync(remembering.path, 'utf8') === expected, 'other bytes written than given');
  });
}

test('with the chunk length remembered, a line measures itself, not the chunk waiting', async (t) => {
  const measured = async (remember: boolean) => {
    const { destination } = await fileDestination(t, `${remember}.log`);
    if (remember) rememberTailLength(destination);
    const byteLength = Buffer.byteLength;
    let longest = 0;
    Buffer.byteLength = ((text: string) => {
      longest = Math.max(longest, text.length);
      return byteLength(text);
    }) as typeof Buffer.byteLength;
    try {
      for (const line of lines) destination.write(line);
    } finally {
      Buffer.byteLength = byteLength;
    }
    await close(destination);
    return longest;
  };
  const longestLine = Math.max(...lines.map((line) => line.length));
  assert.ok((await measured(false)) > 4 * longestLine, 'sonic-boom no longer measures its chunk: see log-stream.ts');
  assert.equal(await measured(true), longestLine);
});

test('standard output goes through the remembered chunk length, on the sonic-boom it was checked against', () => {
  // A new sonic-boom release: read its write() against rememberTailLength, then update CHECKED_SONIC_BOOM.
  assert.equal(sonicBoomVersion(), CHECKED_SONIC_BOOM);
  const plain = pino.destination({ dest: 1 });
  const output = standardOutput();
  assert.notEqual(output.write, plain.write);
});
