import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';
import { loadConfig } from '../src/config.js';
import type { Clock } from '../src/clock.js';
import { runWebhooksCommand } from '../src/cli/webhooks.js';
import { startRelay, type RelayOptions } from '../src/events/relay.js';
import { issueKey } from '../src/keys/issue.js';
import { openStore } from '../src/store/open.js';
import type { Store } from '../src/store/store.js';
import { formatEventId } from '../src/events/ids.js';
import type { AttemptOutcome, ClaimedDelivery } from '../src/store/webhooks.js';

export interface Received {
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

/**
 * A webhook receiver on loopback, closed after the test: `answer` decides each reply (by the
 * request's number, from 0); every request is kept in `received`, in arrival order.
 */
export async function startReceiver(
  t: TestContext,
  answer: (request: Received, index: number, response: ServerResponse) => void = (_r, _i, response) =>
    void response.writeHead(204).end(),
) {
  const received: Received[] = [];
  const waiters: (() => void)[] = [];
  const server = createServer((request: IncomingMessage, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const got = { headers: request.headers, body: Buffer.concat(chunks).toString('utf8'), at: Date.now() };
      const index = received.push(got) - 1;
      for (const wake of waiters.splice(0)) wake();
      answer(got, index, response);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    return new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as AddressInfo;
  /** Resolves once `count` requests have arrived; rejects after `ms`. */
  const waitFor = async (count: number, ms = 10_000) => {
    const deadline = Date.now() + ms;
    while (received.length < count) {
      if (Date.now() > deadline) throw new Error(`the receiver got ${received.length} requests, not ${count}`);
      await new Promise<void>((resolve) => {
        waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
    return received;
  };
  return { url: `http://127.0.0.1:${port}/hook`, port, received, waitFor, server };
}

/**
 * A receiver that holds every request open, unanswered, until told to answer (204 from then on),
 * as a receiver that hangs would.
 */
export async function holdingReceiver(t: TestContext) {
  let answering = false;
  const held: ServerResponse[] = [];
  const receiver = await startReceiver(t, (_request, _index, response) => {
    if (answering) response.writeHead(204).end();
    else held.push(response);
  });
  return {
    ...receiver,
    /** Answers the requests from now on (true), or holds them (false). */
    answer: (on: boolean) => void (answering = on),
    /** Cuts the connections of the requests held so far. */
    dropHeld: () => held.splice(0).forEach((response) => response.destroy()),
  };
}

/** The relay's settings for loopback receivers: small retry and give-up, http allowed on 127.0.0.1. */
export function relayConfig(env: Record<string, string> = {}) {
  return loadConfig({
    PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1',
    PETSTORE_WEBHOOK_RETRY_MS: '20',
    PETSTORE_WEBHOOK_TIMEOUT_MS: '2000',
    ...env,
  });
}

/** Log lines a relay wrote, as objects with their message in `msg`. */
export type Lines = Record<string, unknown>[];

/** Waits until `check` is true, polling every 20 ms, for at most `ms`. */
export async function until(check: () => boolean | Promise<boolean>, ms = 10_000, what = 'the condition') {
  for (const deadline = Date.now() + ms; !(await check()); await new Promise((resolve) => setTimeout(resolve, 20))) {
    if (Date.now() > deadline) throw new Error(`${what} did not happen within ${ms} ms`);
  }
}

/**
 * `looked()`: resolves, to the deliveries leased, once the relay has made a whole look begun
 * after the call; rejects after `ms`. `hear` is the relay's `looked` option; `looks()` counts the
 * looks heard so far. A test shows what the relay does at a given time with it, instead of
 * waiting to see whether something happens.
 */
export function watchLooks() {
  let asked: { at: number; done: (claimed: ClaimedDelivery[]) => void }[] = [];
  let heard = 0;
  const hear = (claimed: ClaimedDelivery[], began: number) => {
    heard += 1;
    const [done, waiting] = [asked.filter(({ at }) => began >= at), asked.filter(({ at }) => began < at)];
    asked = waiting;
    for (const { done: resolve } of done) resolve(claimed);
  };
  const looked = (ms = 5000) =>
    new Promise<ClaimedDelivery[]>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the relay made no whole look within ${ms} ms`)), ms);
      asked.push({
        at: performance.now(),
        done: (claimed) => {
          clearTimeout(timer);
          resolve(claimed);
        },
      });
    });
  return { hear, looked, looks: () => heard };
}

/**
 * A relay on `store`, stopped after the test; it polls every 20 ms and logs into `lines`.
 * `looked()` resolves once it has made a whole look begun after the call (watchLooks).
 */
export function testRelay(
  t: TestContext,
  store: Store,
  { env, ...options }: Partial<Omit<RelayOptions, 'store' | 'config' | 'log'>> & { env?: Record<string, string> } = {},
) {
  const lines: Lines = [];
  const at = (level: string) => (object: object, msg: string) => void lines.push({ level, ...object, msg });
  const { hear, looked } = watchLooks();
  const relay = startRelay({
    store,
    config: relayConfig(env),
    log: { info: at('info'), warn: at('warn'), error: at('error') },
    pollMs: 20,
    looked: hear,
    ...options,
  });
  t.after(() => relay.stop(500));
  return { relay, lines, looked };
}

/**
 * Waits until the feed lists `count` events: on PostgreSQL an event is handed out once the feed
 * can list it, after every transaction older than its own has ended (docs/events.md#ordering),
 * which another test on the same server may hold open a moment.
 */
export async function eventsListed(store: Store, count: number) {
  await until(async () => (await store.listEvents({ limit: 100 })).length >= count, 10_000, `${count} events listed`);
}

/** Runs `petstore webhooks …` in process on `store`; resolves to its exit status and output lines. */
export async function webhooksCli(
  store: Store,
  args: string[],
  { allowHttp = ['127.0.0.1'], now }: { allowHttp?: string[]; now?: Clock } = {},
) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runWebhooksCommand(args, {
    io: { out: (line) => out.push(line), err: (line) => err.push(line) },
    withStore: (run) => run(store),
    allowHttp: () => allowHttp,
    now: now && (() => new Date(now.now())),
  });
  return { code, out, err };
}

/** Adds an endpoint with `webhooks add --json`, as a script would, and returns what it printed. */
export async function addEndpoint(store: Store, url: string, extra: string[] = []) {
  const { code, out, err } = await webhooksCli(store, ['add', url, '--json', ...extra]);
  if (code !== 0) throw new Error(`webhooks add exited ${code}: ${err.join('\n')}`);
  return JSON.parse(out[0]!) as { id: number; url: string; description: string; secret: string; state: string };
}

/**
 * Readies the database `env` names as an operator would before the first start (migrate, an API
 * key, an endpoint for `url`), with the commands' own code in this process: only the service the
 * test starts needs a process. Resolves to the key and the endpoint's secret.
 */
export async function prepareDatabase(env: Record<string, string>, url: string) {
  const store = await openStore(loadConfig(env));
  try {
    await store.migrate();
    const { key } = await issueKey(store, 'test');
    const { secret } = await addEndpoint(store, url);
    return { key, secret };
  } finally {
    await store.close();
  }
}

/** POST /v1/pets with `body` to the service at `base` (a started process's URL), as `key`. */
export function createPetAt(base: string, key: string, body: string, headers: Record<string, string> = {}) {
  return fetch(`${base}/v1/pets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', ...headers },
    body,
  });
}

/** The outcome of `delivery`'s attempt at `at`, as a relay records it: a success, a failure retried at `retryAt`, or one given up. */
export function outcomeOf(
  delivery: ClaimedDelivery,
  at: number,
  result: 'ok' | 'retry' | 'give up',
  retryAt = at + 60_000,
  disableUnlessSuccessSince = at - 86_400_000,
) {
  return {
    record: {
      endpointId: delivery.endpointId,
      eventId: formatEventId(delivery.position),
      attempt: delivery.attempt,
      at: new Date(at),
      status: result === 'ok' ? 204 : 500,
      error: result === 'ok' ? null : 'HTTP 500',
      durationMs: 1,
    },
    position: delivery.position,
    ok: result === 'ok',
    retryAt: result === 'retry' ? retryAt : undefined,
    disableUnlessSuccessSince,
    jitter: 0,
  } satisfies AttemptOutcome;
}
