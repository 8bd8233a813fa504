import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import { test, type TestContext } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { loadConfig } from '../src/config.js';
import { ANSWER_BODY_LIMIT, postEvent } from '../src/events/deliver.js';
import { MAX_RETRY_DELAY_MS, retryDelay } from '../src/events/retries.js';
import { makeSecret, sign, signatures } from '../src/events/signature.js';
import { refuseWebhookUrl } from '../src/events/url-policy.js';
import { startReceiver } from './webhooks.js';

test('signatures match an independent implementation (standardwebhooks) for any secret, id, time and body', () => {
  for (let i = 0; i < 50; i++) {
    const secret = makeSecret();
    const id = `evt_${randomBytes(16).toString('hex')}`;
    const timestamp = 1_700_000_000 + i * 7919;
    const body = JSON.stringify({ n: i, text: randomBytes(i * 3).toString('latin1') });
    assert.equal(sign(secret, id, timestamp, body), new Webhook(secret).sign(id, new Date(timestamp * 1000), body));
  }
  const [a, b] = [makeSecret(), makeSecret()];
  const both = signatures([a, b], 'evt_1', 1_700_000_000, '{}');
  assert.deepEqual(both.split(' '), [sign(a, 'evt_1', 1_700_000_000, '{}'), sign(b, 'evt_1', 1_700_000_000, '{}')]);
});

test('retries wait the retry time doubled per attempt, up to half as much again, never more than the cap', () => {
  for (const [attempt, base] of [
    [1, 5000],
    [2, 10_000],
    [5, 80_000],
  ] as const) {
    assert.equal(
      retryDelay(attempt, 5000, () => 0),
      base,
    );
    assert.equal(
      retryDelay(attempt, 5000, () => 1),
      base * 1.5,
    );
    const random = retryDelay(attempt, 5000);
    assert.ok(random >= base && random <= base * 1.5, `${random}`);
  }
  assert.equal(
    retryDelay(40, 5000, () => 0),
    MAX_RETRY_DELAY_MS,
  );
  assert.equal(
    retryDelay(1000, 5000, () => 1),
    MAX_RETRY_DELAY_MS * 1.5,
  );
});

test('the URL policy: https, or http for a listed host; never credentials', () => {
  const allowed = ['localhost', '10.0.0.7', '::1'];
  for (const url of [
    'https://hooks.example/a?b=c',
    'http://localhost:3000/hook',
    'http://LOCALHOST/hook',
    'http://10.0.0.7/hook',
    'http://[::1]:8080/hook',
  ]) {
    assert.equal(refuseWebhookUrl(url, allowed), undefined, url);
  }
  for (const url of [
    'http://hooks.example/hook',
    'http://localhost.hooks.example/hook',
    'http://10.0.0.8/hook',
    'https://user:secret@hooks.example/hook',
    'https://:secret@hooks.example/hook',
    'ws://localhost/hook',
    'file:///etc/passwd',
    'https://hooks.example/\nhook',
    '/hook',
    `https://hooks.example/${'a'.repeat(2100)}`,
  ]) {
    assert.notEqual(refuseWebhookUrl(url, allowed), undefined, url);
  }
});

const agents = () => ({ http: new http.Agent(), https: new https.Agent() });

async function post(t: TestContext, url: string, timeoutMs = 2000) {
  const pool = agents();
  t.after(() => {
    pool.http.destroy();
    pool.https.destroy();
  });
  return postEvent({ url, body: '{}', headers: {}, timeoutMs, agents: pool, signal: new AbortController().signal });
}

test("reads at most 64 KiB of the receiver's answer, then drops the connection", async (t) => {
  let written = 0;
  let closed = false;
  const receiver = await startReceiver(t, (_request, _index, response) => {
    response.writeHead(200, { 'content-type': 'text/plain' });
    const chunk = Buffer.alloc(16 * 1024, 'x');
    const more = () => {
      while (!closed && written < 64 * 1024 * 1024) {
        written += chunk.length;
        if (!response.write(chunk)) return void response.once('drain', more);
      }
      response.end();
    };
    response.on('close', () => (closed = true));
    more();
  });
  const attempt = await post(t, receiver.url);
  assert.equal(attempt.result, 'success');
  assert.equal(attempt.status, 200);
  for (let i = 0; i < 100 && !closed; i++) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.ok(closed, 'the connection was dropped');
  assert.ok(written < 64 * 1024 * 1024, `the receiver wrote ${written} bytes before it was cut off`);
});

test('the answer read is exactly 64 KiB: one more byte ends the attempt at once, that many alone waits for the end', async (t) => {
  // The receiver writes `size` bytes of its body, then neither writes nor ends it.
  const bodyOf = async (size: number) => {
    const receiver = await startReceiver(t, (_request, _index, response) => {
      response.writeHead(200, { 'content-type': 'text/plain' });
      response.write(Buffer.alloc(size, 'x'));
    });
    return post(t, receiver.url, 1000);
  };
  const over = await bodyOf(ANSWER_BODY_LIMIT + 1);
  assert.equal(over.result, 'success');
  assert.ok(over.durationMs < 900, `cut off after ${over.durationMs} ms`);
  const at = await bodyOf(ANSWER_BODY_LIMIT);
  // Still reading when the timeout came: the status, a 2xx in time, decides.
  assert.equal(at.result, 'success');
  assert.ok(at.durationMs >= 1000, `ended after ${at.durationMs} ms`);
});

test('an answer that does not come within the timeout is a failed attempt, a refused connection too', async (t) => {
  const receiver = await startReceiver(t, () => {});
  const started = Date.now();
  const late = await post(t, receiver.url, 300);
  assert.equal(late.result, 'timeout');
  assert.equal(late.status, null);
  assert.ok(Date.now() - started < 2000);
  receiver.server.closeAllConnections();
  await new Promise((resolve) => receiver.server.close(resolve));
  const refused = await post(t, receiver.url);
  assert.equal(refused.result, 'network_error');
  assert.match(String(refused.error), /ECONNREFUSED/);
});

test('the webhook settings: defaults, the lease after the timeout, hosts for plain http', () => {
  const defaults = loadConfig({});
  assert.deepEqual(
    [
      defaults.webhookDelivery,
      defaults.webhookConcurrency,
      defaults.webhookTimeoutMs,
      defaults.webhookRetryMs,
      defaults.webhookGiveUpMs,
      defaults.webhookLeaseMs,
      defaults.webhookAllowHttp,
    ],
    [true, 64, 10_000, 5000, 3 * 86_400_000, 15_000, []],
  );
  const set = loadConfig({
    PETSTORE_WEBHOOK_DELIVERY: 'off',
    PETSTORE_WEBHOOK_TIMEOUT_MS: '500',
    PETSTORE_WEBHOOK_GIVE_UP: '90s',
    PETSTORE_WEBHOOK_ALLOW_HTTP: 'localhost, 127.0.0.1,::1,[::1],receiver.internal',
  });
  assert.equal(set.webhookDelivery, false);
  assert.equal(set.webhookLeaseMs, 5500);
  assert.equal(set.webhookGiveUpMs, 90_000);
  assert.deepEqual(set.webhookAllowHttp, ['localhost', '127.0.0.1', '::1', '[::1]', 'receiver.internal']);
  for (const [env, message] of [
    [{ PETSTORE_WEBHOOK_DELIVERY: 'no' }, /PETSTORE_WEBHOOK_DELIVERY must be on or off/],
    [{ PETSTORE_WEBHOOK_LEASE_MS: '10000' }, /PETSTORE_WEBHOOK_LEASE_MS must be more than PETSTORE_WEBHOOK_TIMEOUT_MS/],
    [{ PETSTORE_WEBHOOK_ALLOW_HTTP: 'http://localhost' }, /PETSTORE_WEBHOOK_ALLOW_HTTP must be host names/],
    [{ PETSTORE_WEBHOOK_CONCURRENCY: '0' }, /PETSTORE_WEBHOOK_CONCURRENCY must be an integer from 1 to 1000/],
    [{ PETSTORE_WEBHOOK_GIVE_UP: '3 days' }, /PETSTORE_WEBHOOK_GIVE_UP must be a whole number and a unit/],
  ] as const) {
    assert.throws(() => loadConfig(env), message);
  }
});
