import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { tempSqliteStore } from './helpers.js';
import { freePort } from './process.js';
import { addEndpoint, testRelay } from './webhooks.js';

const page = readFileSync(new URL('../docs/webhooks.md', import.meta.url), 'utf8');

test("docs/webhooks.md's receiver, saved and run as the page says, verifies the service's deliveries and refuses a forged one", async (t) => {
  const blocks = [...page.matchAll(/```js\n([\s\S]*?)```/g)].map((match) => match[1]!);
  assert.equal(blocks.length, 1, 'one receiver example');
  assert.match(blocks[0]!, /\.listen\(3000\);/);
  // The commands the page gives to run it: the install, then the file it is saved as.
  const run = /```sh\nnpm install standardwebhooks\nPETSTORE_WEBHOOK_SECRET=whsec_… node ([a-z]+\.[cm]?js)\n```/.exec(
    page,
  );
  assert.ok(run, 'the page says how to run the receiver');
  const name = run[1]!;
  assert.ok(page.includes(`save it as \`${name}\``), `the page says to save it as ${name}`);
  // In a package of its own, whose package.json says "type": "commonjs" as npm init writes it (a
  // .js file is then CommonJS); inside the repository, so that it finds the standardwebhooks
  // package as an installed receiver would.
  const dir = mkdtempSync(join(new URL('.', import.meta.url).pathname, '.receiver-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'package.json'), '{ "name": "receiver", "private": true, "type": "commonjs" }\n');
  const port = await freePort();
  writeFileSync(join(dir, name), blocks[0]!.replace('.listen(3000);', `.listen(${port}, '127.0.0.1');`));

  const { store } = await tempSqliteStore(t);
  const endpoint = await addEndpoint(store, `http://127.0.0.1:${port}/`);
  const child = spawn(process.execPath, [name], {
    cwd: dir,
    env: { PETSTORE_WEBHOOK_SECRET: endpoint.secret, PATH: '' },
  });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (chunk) => (output += chunk));
  child.stderr.on('data', (chunk) => (output += chunk));
  let exited: number | null | undefined;
  child.on('exit', (code) => (exited = code));
  for (let i = 0; i < 100; i++) {
    assert.equal(exited, undefined, `node ${name} exited: ${output}`);
    const up = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{}' }).catch(() => undefined);
    if (up) {
      assert.equal(up.status, 400, 'unsigned: refused');
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const forged = await fetch(`http://127.0.0.1:${port}/`, {
    method: 'POST',
    headers: {
      'webhook-id': 'evt_1',
      'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
      'webhook-signature': `v1,${Buffer.alloc(32).toString('base64')}`,
    },
    body: '{"id":"evt_1","type":"pet.created","data":{"id":1,"name":"Forged"}}',
  });
  assert.equal(forged.status, 400);

  await store.createPet({ name: 'Rex', categoryId: 7n, status: 'available' });
  testRelay(t, store);
  for (let i = 0; i < 200 && !output.includes('pet.created'); i++) {
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
  assert.match(output, /^pet\.created 1 Rex$/m);
  assert.ok(!output.includes('Forged'));
});

test('docs/webhooks.md and docs/events.md state what "nothing lost" means as the contract does, and promise no more', () => {
  const events = readFileSync(new URL('../docs/events.md', import.meta.url), 'utf8');
  for (const text of [page, events]) {
    const prose = text.replace(/\s+/g, ' ');
    assert.ok(
      prose.includes(
        'every event reaches every endpoint that was enabled when the event was created, unless that endpoint failed ' +
          'for the whole give-up period or was disabled; what an endpoint missed can be sent again with `webhooks replay`',
      ),
    );
    assert.doesNotMatch(prose, /never miss(es)? (one|an event)|whatever happens/i);
  }
});
