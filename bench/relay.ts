// The relay's measures of the events section (bench/README.md#the-relay-measures): the service
// as `npm start` runs it, receivers in bench/receiver.mjs, each measure on a store of its own.
// - idle: pets created one at a time on an idle service, each 201 to its delivery (on PostgreSQL
//   with two instances, created on one, delivered by either);
// - hanging: endpoints at a receiver that never answers, each owed a backlog, beside a healthy
//   endpoint: each new pet's 201 to its delivery there;
// - throughput: a backlog written straight into the store, delivered to one fast receiver: the
//   deliveries a second, and where the time went (the service's CPU, the relay's store calls);
// - outage: the receiver answers 503 for a while, then 204: from the first success to the last
//   event waiting delivered.
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../src/config.js';
import { makeSecret } from '../src/events/signature.js';
import { openStore } from '../src/store/open.js';
import { deliveriesAt, runPetstore, startReceiver, startService, type Running } from './processes.js';
import type { HangingRun, IdleRun, OutageRun, RelayRuns, ThroughputRun } from './report.js';
import { writeEvents, type Seeded } from './seed.js';

export interface RelayOptions {
  serverCpu?: number;
  receiverCpu?: number;
  logFile: (name: string) => string;
}

type Store = 'SQLite' | 'PostgreSQL';
type Receiver = Running;

const BASE_ENV = { PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1' };
const WAIT_MS = 60_000;

async function countOf(receiver: Receiver): Promise<number> {
  return Number(await (await fetch(`${receiver.url}/count`)).text());
}

/** Waits until `receiver` has recorded `count` requests; throws after `ms`, with `service`'s output. */
async function received(receiver: Receiver, count: number, service: Running, ms = WAIT_MS): Promise<void> {
  const deadline = Date.now() + ms;
  while ((await countOf(receiver)) < count) {
    if (Date.now() > deadline || service.child.exitCode !== null) {
      throw new Error(`the receiver got ${await countOf(receiver)} of ${count}:\n${service.output()}`);
    }
    await sleep(20);
  }
}

/** POST /v1/pets to `service`; the new pet's id and when its 201 came (`Date.now()`). */
async function createPet(service: Running, key: string, name: string): Promise<{ pet: string; at: number }> {
  const response = await fetch(`${service.url}/v1/pets`, {
    method: 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: JSON.stringify({ name, categoryId: 7 }),
  });
  const text = await response.text();
  const at = Date.now();
  const pet = /"id":([0-9]+)/.exec(text)?.[1];
  if (response.status !== 201 || pet === undefined) throw new Error(`createPet answered ${response.status}: ${text}`);
  return { pet, at };
}

/** The lags, sorted, from each created pet's 201 to its first delivery at `receiver` (waiting for each). */
async function lagsOf(receiver: Receiver, created: { pet: string; at: number }[], service: Running) {
  const wanted = new Set(created.map((c) => c.pet));
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const first = new Map<string, number>();
    for (const d of await deliveriesAt(receiver.url))
      if (d.pet && wanted.has(d.pet) && !first.has(d.pet)) first.set(d.pet, d.at);
    if (first.size === wanted.size) return created.map((c) => first.get(c.pet)! - c.at).sort((a, b) => a - b);
    if (Date.now() > deadline)
      throw new Error(`${wanted.size - first.size} pets never delivered:\n${service.output()}`);
    await sleep(50);
  }
}

/** Adds an endpoint at `url` with the service's own code, in this process (faster than a command per endpoint). */
async function addEndpoints(seeded: Seeded, urls: string[]): Promise<void> {
  const store = await openStore(loadConfig(seeded.env));
  try {
    for (const url of urls) {
      await store.webhooks.addEndpoint({ url, description: 'bench', secret: makeSecret(), createdAt: Date.now() });
    }
  } finally {
    await store.close();
  }
}

/** The `n`th percentile of sorted `values`, nearest rank. */
const at = (values: number[], p: number) => values[Math.min(values.length - 1, Math.ceil(p * values.length) - 1)]!;

/** Starts `instances` services on `seeded`, each with `env` and a log file of its own. */
async function services(
  name: string,
  seeded: Seeded,
  env: Record<string, string>,
  instances: number,
  { serverCpu, logFile }: RelayOptions,
): Promise<Running[]> {
  const started: Running[] = [];
  for (let i = 0; i < instances; i++) {
    started.push(
      await startService(`${name} ${i + 1}`, { ...seeded.env, ...env }, serverCpu, logFile(`${name}-${i + 1}`)),
    );
  }
  return started;
}

const stopAll = (running: Running[]) => Promise.all(running.map((r) => r.stop()));

/**
 * Idle latency: `count` pets created one at a time, `gapMs` apart, on the first of `instances`
 * services (the others deliver too), each 201 to its delivery at an idle receiver.
 */
export async function runIdle(
  store: Store,
  seeded: Seeded,
  {
    instances,
    count = 50,
    gapMs = 100,
    ...options
  }: RelayOptions & { instances: number; count?: number; gapMs?: number },
): Promise<IdleRun> {
  const receiver = await startReceiver(options.receiverCpu);
  const running: Running[] = [];
  try {
    runPetstore(['webhooks', 'add', `${receiver.url}/idle`, '--json'], { ...seeded.env, ...BASE_ENV });
    running.push(...(await services(`${store} idle`, seeded, BASE_ENV, instances, options)));
    const [first] = running;
    // Warm: the relays have made their first looks and one delivery.
    await createPet(first!, seeded.key, 'warm');
    await received(receiver, 1, first!);
    const created: { pet: string; at: number }[] = [];
    for (let i = 0; i < count; i++) {
      await sleep(gapMs);
      created.push(await createPet(first!, seeded.key, `idle ${i}`));
      await received(receiver, i + 2, first!);
    }
    const lags = await lagsOf(receiver, created, first!);
    return { store, instances, count, p50Ms: at(lags, 0.5), p99Ms: at(lags, 0.99), maxMs: lags.at(-1)! };
  } finally {
    await stopAll(running);
    await receiver.stop();
  }
}

/**
 * Hanging endpoints: a healthy endpoint up (one delivery made), then `hanging` endpoints at a
 * receiver that never answers, and `backlog` events written, owed to every endpoint; once the
 * healthy one has them, `count` pets created `gapMs` apart: each 201 to its delivery there.
 */
export async function runHanging(
  store: Store,
  seeded: Seeded,
  {
    hanging,
    backlog = 100,
    count = 20,
    gapMs = 250,
    ...options
  }: RelayOptions & { hanging: number; backlog?: number; count?: number; gapMs?: number },
): Promise<HangingRun> {
  const healthy = await startReceiver(options.receiverCpu);
  const hang = await startReceiver(options.receiverCpu, { hang: true });
  let running: Running[] = [];
  try {
    runPetstore(['webhooks', 'add', `${healthy.url}/healthy`, '--json'], { ...seeded.env, ...BASE_ENV });
    running = await services(`${store} hanging ${hanging}`, seeded, BASE_ENV, 1, options);
    const service = running[0]!;
    await createPet(service, seeded.key, 'warm');
    await received(healthy, 1, service);
    await addEndpoints(
      seeded,
      Array.from({ length: hanging }, (_, i) => `${hang.url}/hang?endpoint=${i}`),
    );
    await writeEvents(seeded, backlog);
    await received(healthy, 1 + backlog, service);
    const created: { pet: string; at: number }[] = [];
    for (let i = 0; i < count; i++) {
      await sleep(gapMs);
      created.push(await createPet(service, seeded.key, `beside ${i}`));
    }
    const lags = await lagsOf(healthy, created, service);
    return {
      store,
      hanging,
      backlog,
      count,
      gapMs,
      p50Ms: at(lags, 0.5),
      maxMs: lags.at(-1)!,
      held: await countOf(hang),
    };
  } finally {
    await stopAll(running);
    await healthy.stop();
    await hang.stop();
  }
}

/** The relay's store calls so far, from /metrics: seconds spent in webhooks.claim and webhooks.finish. */
async function storeSeconds(service: Running, key: string): Promise<number> {
  const text = await (await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${key}` } })).text();
  let sum = 0;
  for (const [, seconds] of text.matchAll(
    /^petstore_store_duration_seconds_sum\{method="webhooks\.(?:claim|finish)",outcome="ok"\} (\S+)$/gm,
  )) {
    sum += Number(seconds);
  }
  return sum;
}

/**
 * Throughput: `events` written straight into the store, delivered to one fast receiver by
 * `instances` services: deliveries a second from the first to the last, and per second of it the
 * services' CPU time and the time their relays spent in store calls.
 */
export async function runThroughput(
  store: Store,
  seeded: Seeded,
  { instances, events = 30_000, ...options }: RelayOptions & { instances: number; events?: number },
): Promise<ThroughputRun> {
  const receiver = await startReceiver(options.receiverCpu);
  const running: Running[] = [];
  try {
    runPetstore(['webhooks', 'add', `${receiver.url}/fast`, '--json'], { ...seeded.env, ...BASE_ENV });
    running.push(...(await services(`${store} throughput`, seeded, BASE_ENV, instances, options)));
    // Warm: a first batch delivered.
    const warm = 1000;
    await writeEvents(seeded, warm);
    await received(receiver, warm, running[0]!);
    const cpuBefore = running.map((r) => r.cpuMicros());
    const storeBefore = await Promise.all(running.map((r) => storeSeconds(r, seeded.key)));
    await writeEvents(seeded, events);
    await received(receiver, warm + events, running[0]!, 300_000);
    const cpu = running.reduce((sum, r, i) => sum + (r.cpuMicros() - cpuBefore[i]!), 0) / 1e6;
    const inStore =
      (await Promise.all(running.map((r) => storeSeconds(r, seeded.key)))).reduce((sum, s) => sum + s, 0) -
      storeBefore.reduce((sum, s) => sum + s, 0);
    const times = (await deliveriesAt(receiver.url)).slice(warm).map((d) => d.at);
    const seconds = (Math.max(...times) - Math.min(...times)) / 1000;
    const ids = new Set((await deliveriesAt(receiver.url)).map((d) => d.id));
    return {
      store,
      instances,
      events,
      seconds,
      perSecond: (events - 1) / seconds,
      cpuShare: cpu / seconds,
      storeShare: inStore / seconds,
      duplicates: warm + events - ids.size,
    };
  } finally {
    await stopAll(running);
    await receiver.stop();
  }
}

/**
 * After an outage: the receiver answers 503 from the start for `outageSeconds`, `waiting` pets
 * created meanwhile (the first at once, the rest spread over the first half), then 204: from the
 * first success to the last of them delivered, and whether they came oldest first.
 * PETSTORE_WEBHOOK_RETRY_MS as `retryMs`.
 */
export async function runOutage(
  store: Store,
  seeded: Seeded,
  {
    outageSeconds = 8,
    waiting = 20,
    retryMs = 1000,
    ...options
  }: RelayOptions & { outageSeconds?: number; waiting?: number; retryMs?: number },
): Promise<OutageRun> {
  const receiver = await startReceiver(options.receiverCpu);
  let running: Running[] = [];
  const env = { ...BASE_ENV, PETSTORE_WEBHOOK_RETRY_MS: String(retryMs) };
  try {
    runPetstore(['webhooks', 'add', `${receiver.url}/outage`, '--json'], { ...seeded.env, ...env });
    running = await services(`${store} outage`, seeded, env, 1, options);
    const service = running[0]!;
    await createPet(service, seeded.key, 'warm');
    await received(receiver, 1, service);
    await fetch(`${receiver.url}/down`);
    const downAt = Date.now();
    const created: string[] = [];
    for (let i = 0; i < waiting; i++) {
      created.push((await createPet(service, seeded.key, `during ${i}`)).pet);
      await sleep((outageSeconds * 500) / waiting);
    }
    await sleep(Math.max(0, downAt + outageSeconds * 1000 - Date.now()));
    await fetch(`${receiver.url}/up`);
    const wanted = new Set(created);
    const deadline = Date.now() + WAIT_MS;
    for (;;) {
      const done = (await deliveriesAt(receiver.url)).filter((d) => d.status === 204 && d.pet && wanted.has(d.pet));
      const firsts = new Map<string, number>();
      for (const d of done) if (!firsts.has(d.pet!)) firsts.set(d.pet!, d.at);
      if (firsts.size === wanted.size) {
        const successes = (await deliveriesAt(receiver.url)).filter((d) => d.status === 204 && d.at >= downAt);
        // In the order they arrived: each that came before an older one is out of order.
        const order = [...firsts.entries()].sort((a, b) => a[1] - b[1]).map(([pet]) => created.indexOf(pet));
        const outOfOrder = order.filter((place, i) => order.slice(i + 1).some((later) => later < place)).length;
        return {
          store,
          outageSeconds,
          waiting,
          retryMs,
          drainMs: Math.max(...firsts.values()) - successes[0]!.at,
          outOfOrder,
          failedAttempts: (await deliveriesAt(receiver.url)).filter((d) => d.status === 503).length,
        };
      }
      if (Date.now() > deadline) throw new Error(`not drained:\n${service.output()}`);
      await sleep(50);
    }
  } finally {
    await stopAll(running);
    await receiver.stop();
  }
}

/** Which relay measures to run, and their sizes. */
export interface RelayPlan {
  measures: ('idle' | 'hanging' | 'throughput' | 'outage')[];
  /** Hanging endpoints beside the healthy one, one run each. */
  hanging: number[];
  /** Events written for the throughput measure. */
  throughputEvents: number;
  outageSeconds: number;
}

export const RELAY_PLAN: RelayPlan = {
  measures: ['idle', 'hanging', 'throughput', 'outage'],
  hanging: [30, 1000],
  throughputEvents: 30_000,
  outageSeconds: 8,
};

/**
 * Every measure of `plan` on each store (`onEachStore`: a fresh SQLite file, then, when
 * `postgres`, a PostgreSQL schema), PostgreSQL's idle and throughput measures with one instance
 * and with two. `log` hears of each as it starts.
 */
export async function runRelayMeasures(
  plan: RelayPlan,
  onEachStore: <T>(name: string, run: (store: Store, seeded: Seeded) => Promise<T>) => Promise<T[]>,
  options: RelayOptions & { log: (line: string) => void },
): Promise<RelayRuns> {
  const { log } = options;
  const runs: RelayRuns = { idle: [], hanging: [], throughput: [], outage: [] };
  const instancesOf = (store: Store) => (store === 'SQLite' ? [1] : [1, 2]);
  if (plan.measures.includes('idle')) {
    for (const instances of [1, 2]) {
      runs.idle.push(
        ...(
          await onEachStore(`idle-${instances}`, async (store, seeded) => {
            if (!instancesOf(store).includes(instances)) return [];
            log(`relay: ${store}, ${instances} instance(s), pets created one at a time to an idle receiver`);
            return [await runIdle(store, seeded, { ...options, instances })];
          })
        ).flat(),
      );
    }
  }
  if (plan.measures.includes('hanging')) {
    for (const hanging of plan.hanging) {
      runs.hanging.push(
        ...(await onEachStore(`hanging-${hanging}`, (store, seeded) => {
          log(`relay: ${store}, ${hanging} endpoints hanging beside a healthy one`);
          return runHanging(store, seeded, { ...options, hanging });
        })),
      );
    }
  }
  if (plan.measures.includes('throughput')) {
    for (const instances of [1, 2]) {
      runs.throughput.push(
        ...(
          await onEachStore(`throughput-${instances}`, async (store, seeded) => {
            if (!instancesOf(store).includes(instances)) return [];
            log(`relay: ${store}, ${instances} instance(s), ${plan.throughputEvents} events to one fast receiver`);
            return [await runThroughput(store, seeded, { ...options, instances, events: plan.throughputEvents })];
          })
        ).flat(),
      );
    }
  }
  if (plan.measures.includes('outage')) {
    runs.outage.push(
      ...(await onEachStore('outage', (store, seeded) => {
        log(`relay: ${store}, the drain after a ${plan.outageSeconds} s outage`);
        return runOutage(store, seeded, { ...options, outageSeconds: plan.outageSeconds });
      })),
    );
  }
  return runs;
}
