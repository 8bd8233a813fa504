import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { manualClock, tempSqliteStore } from './helpers.js';
import { childEnv, runCli } from './process.js';
import { storeKinds } from './stores.js';
import { holdingReceiver, prepareDatabase, webhooksCli } from './webhooks.js';

const SECRET = /^whsec_[A-Za-z0-9+/]{43}=$/;

interface Listed {
  id: number;
  url: string;
  description: string;
  state: string;
  createdAt: string;
  lastSuccessAt: string | null;
  lastFailureAt: string | null;
  waiting: number;
  disabledAt: string | null;
  previousSecretUntil: string | null;
}

for (const kind of storeKinds) {
  const it = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(`${kind.name}: ${name}`, { skip: kind.skip }, fn);

  it('add --json prints the id and the secret once; list --json never shows a secret', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const clock = manualClock(Date.UTC(2026, 10, 28, 12, 0, 0));
    const added = await webhooksCli(
      store,
      ['add', 'https://search.example/hooks?token=abc', '--description', 'search', '--json'],
      {
        now: clock,
      },
    );
    assert.equal(added.code, 0, added.err.join('\n'));
    assert.equal(added.out.length, 1);
    const endpoint = JSON.parse(added.out[0]!) as Record<string, unknown>;
    assert.deepEqual(Object.keys(endpoint), ['id', 'url', 'description', 'secret', 'state', 'createdAt']);
    assert.match(String(endpoint.secret), SECRET);
    assert.equal(endpoint.url, 'https://search.example/hooks?token=abc');
    assert.equal(endpoint.state, 'enabled');
    assert.equal(endpoint.createdAt, '2026-11-28T12:00:00.000Z');

    const second = await webhooksCli(store, ['add', 'https://shop.example/hook']);
    assert.equal(second.code, 0);
    assert.match(second.out[0]!, /^id\t[0-9]+$/);
    assert.match(second.out[1]!.split('\t')[1]!, SECRET);
    assert.notEqual(second.out[1]!.split('\t')[1], endpoint.secret, 'each endpoint has its own secret');

    const listed = await webhooksCli(store, ['list', '--json']);
    const rows = listed.out.map((line) => JSON.parse(line) as Listed);
    assert.deepEqual(
      rows.map((row) => [
        row.id,
        row.url,
        row.description,
        row.state,
        row.waiting,
        row.lastSuccessAt,
        row.lastFailureAt,
      ]),
      [
        [endpoint.id, 'https://search.example/hooks?token=abc', 'search', 'enabled', 0, null, null],
        [Number(second.out[0]!.split('\t')[1]), 'https://shop.example/hook', '', 'enabled', 0, null, null],
      ],
    );
    const everything = [...listed.out, ...(await webhooksCli(store, ['list'])).out].join('\n');
    assert.ok(!everything.includes('whsec_'), 'no secret in list');
  });

  it('refuses a URL the policy refuses, and a description with a control character, storing nothing', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const refusals: [string[], RegExp][] = [
      [['add', 'http://receiver.example/hook'], /only https:\/\/ URLs are allowed; http:\/\/ only for a host listed/],
      [['add', 'https://user:pass@receiver.example/hook'], /user name or password/],
      [['add', 'https://user@receiver.example/hook'], /user name or password/],
      [['add', 'ftp://receiver.example/hook'], /only https:\/\/ URLs are allowed \(got ftp:\/\/\)/],
      [['add', 'receiver.example/hook'], /not an absolute URL/],
      [['add', 'https://receiver.example/ho\tok'], /space or a control character/],
      [['add', 'https://receiver.example/hook', '--description', 'a\u0007b'], /control character/],
      [['add', 'https://receiver.example/hook', '--description', 'x'.repeat(256)], /at most 255/],
      [['add'], /needs one URL/],
      [['roll', '1', '--grace', 'soon'], /--grace must be/],
      [['deliveries', 'one'], /needs the one numeric id/],
      [['bogus'], /unknown command: webhooks bogus/],
      // A name every object has is no command either.
      [['toString'], /unknown command: webhooks toString/],
      [['constructor'], /unknown command: webhooks constructor/],
    ];
    for (const [args, message] of refusals) {
      const { code, err } = await webhooksCli(store, args, { allowHttp: ['localhost'] });
      assert.equal(code, 2, `${args.join(' ')}: ${err.join('\n')}`);
      assert.match(err.join('\n'), message);
    }
    assert.deepEqual(await store.webhooks.listEndpoints(), []);
    // http:// for a listed host (by name or address, IPv6 included).
    for (const url of ['http://localhost:8080/hook', 'http://[::1]:9/hook', 'http://127.0.0.1/hook']) {
      const { code, err } = await webhooksCli(store, ['add', url], { allowHttp: ['localhost', '::1', '127.0.0.1'] });
      assert.equal(code, 0, `${url}: ${err.join('\n')}`);
    }
  });

  it('escapes control and bidirectional characters in every output', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    const description = 'shop \u202Egnp.exe\u202C and \u2066isolate\u2069';
    const added = await webhooksCli(store, [
      'add',
      'https://shop.example/hook',
      '--description',
      description,
      '--json',
    ]);
    assert.equal(added.code, 0, added.err.join('\n'));
    assert.ok(!/[\u202a-\u202e\u2066-\u2069]/.test(added.out[0]!), 'the JSON line escapes them');
    assert.equal((JSON.parse(added.out[0]!) as { description: string }).description, description, 'and parses back');
    const table = (await webhooksCli(store, ['list'])).out.join('\n');
    assert.ok(table.includes('shop U+202Egnp.exeU+202C and U+2066isolateU+2069'), table);
    const json = (await webhooksCli(store, ['list', '--json'])).out[0]!;
    assert.ok(json.includes('\\u202e'), json);
    assert.equal((JSON.parse(json) as Listed).description, description);
  });

  it('remove, enable, roll and deliveries answer 1 for an unknown id, and remove takes an endpoint away', async (t) => {
    const database = await kind.createDatabase(t);
    const store = database.open();
    await store.migrate();
    for (const command of ['remove', 'enable', 'roll', 'deliveries']) {
      const { code, err } = await webhooksCli(store, [command, '42']);
      assert.equal(code, 1, command);
      assert.match(err.join('\n'), /No webhook endpoint has id 42/);
    }
    const added = JSON.parse((await webhooksCli(store, ['add', 'https://a.example/hook', '--json'])).out[0]!) as {
      id: number;
    };
    const enable = await webhooksCli(store, ['enable', String(added.id)]);
    assert.equal(enable.code, 0);
    assert.match(enable.err.join('\n'), /already enabled/);
    const deliveries = await webhooksCli(store, ['deliveries', String(added.id), '--json']);
    assert.deepEqual([deliveries.code, deliveries.out], [0, []]);
    const rolled = await webhooksCli(store, ['roll', String(added.id), '--grace', '2h', '--json'], {
      now: manualClock(Date.UTC(2026, 10, 28, 12, 0, 0)),
    });
    const roll = JSON.parse(rolled.out[0]!) as Record<string, unknown>;
    assert.deepEqual(Object.keys(roll), ['id', 'secret', 'previousSecretUntil']);
    assert.equal(roll.previousSecretUntil, '2026-11-28T14:00:00.000Z');
    const listed = JSON.parse((await webhooksCli(store, ['list', '--json'])).out[0]!) as Listed;
    assert.equal(listed.previousSecretUntil, '2026-11-28T14:00:00.000Z');
    assert.equal((await webhooksCli(store, ['remove', String(added.id)])).code, 0);
    assert.deepEqual((await webhooksCli(store, ['list', '--json'])).out, []);
    assert.equal((await webhooksCli(store, ['remove', String(added.id)])).code, 1);
  });
}

test('petstore webhooks add --json and list --json, read by a script from the installed command', async (t) => {
  const env = childEnv(t, { PETSTORE_WEBHOOK_ALLOW_HTTP: 'localhost' });
  assert.equal((await runCli(['migrate'], env)).code, 0);
  const added = await runCli(['webhooks', 'add', 'http://localhost:9/hook', '--description', 'local', '--json'], env);
  assert.equal(added.code, 0, added.stderr);
  const endpoint = JSON.parse(added.stdout) as { id: number; secret: string };
  assert.match(endpoint.secret, SECRET);
  const listed = await runCli(['webhooks', 'list', '--json'], env);
  assert.equal(listed.code, 0, listed.stderr);
  const lines = listed.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as Listed);
  assert.deepEqual(
    lines.map((line) => [line.id, line.url, line.description, line.state]),
    [[endpoint.id, 'http://localhost:9/hook', 'local', 'enabled']],
  );
  assert.ok(!listed.stdout.includes(endpoint.secret) && !listed.stderr.includes(endpoint.secret));
  const refused = await runCli(['webhooks', 'add', 'http://receiver.example/hook'], env);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /PETSTORE_WEBHOOK_ALLOW_HTTP/);
  const help = await runCli(['webhooks', 'roll', '--help'], env);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^Usage: petstore webhooks roll <id>/);
});

test('webhooks add of an http:// URL says on one line that the service needs the same PETSTORE_WEBHOOK_ALLOW_HTTP', async (t) => {
  const { store } = await tempSqliteStore(t);
  const local = await webhooksCli(store, ['add', 'http://127.0.0.1:9/hook', '--json'], { allowHttp: ['127.0.0.1'] });
  assert.equal(local.code, 0);
  assert.deepEqual(local.err, [
    "http:// is allowed for 127.0.0.1 by this command's PETSTORE_WEBHOOK_ALLOW_HTTP: the service sends to it only " +
      'if its own PETSTORE_WEBHOOK_ALLOW_HTTP lists 127.0.0.1 too (else each attempt is refused and retried).',
  ]);
  const secure = await webhooksCli(store, ['add', 'https://shop.example/hook', '--json']);
  assert.deepEqual([secure.code, secure.err], [0, []]);
});

test('petstore webhooks test reads PETSTORE_WEBHOOK_TIMEOUT_MS and PETSTORE_WEBHOOK_ALLOW_HTTP from its environment, and exits 1 without a 2xx', async (t) => {
  const receiver = await holdingReceiver(t);
  const env = childEnv(t, { PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1', PETSTORE_WEBHOOK_TIMEOUT_MS: '300' });
  // The database readied in process: only the command under test needs one.
  await prepareDatabase(env, receiver.url);
  const id = 1;
  const held = await runCli(['webhooks', 'test', String(id), '--json'], env);
  assert.equal(held.code, 1, held.stderr);
  assert.deepEqual(
    (({ ok, status, error }) => ({ ok, status, error }))(JSON.parse(held.stdout) as Record<string, unknown>),
    { ok: false, status: null, error: 'no answer within 300 ms' },
  );
  receiver.answer(true);
  const answered = await runCli(['webhooks', 'test', String(id)], env);
  assert.equal(answered.code, 0, answered.stderr);
  assert.match(answered.stdout, /^HTTP 204 in [0-9]+ ms\n$/);
  const refused = await runCli(['webhooks', 'test', String(id)], { ...env, PETSTORE_WEBHOOK_ALLOW_HTTP: '' });
  assert.equal(refused.code, 1);
  assert.match(refused.stdout, /^failed: URL refused: /);
});
