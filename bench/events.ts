// The events row of `npm run bench`: webhook delivery to a local receiver (bench/receiver.mjs).
// The shipped service on a store of its own, one endpoint registered, creates at a steady rate;
// measured: events delivered a second while the creates run, the time to drain what is left after
// the last 201, and the lag from each 201 to its event's first delivery. Then the backlog measure:
// the service's RSS with 100,000 events waiting for a receiver that hangs, against none waiting.
// bench/README.md explains it.
// Then the relay's measures (bench/relay.ts): idle latency, endpoints hanging beside a healthy
// one, deliveries a second to one fast receiver, the drain after an outage.
// Alone, after `npm run build`:
//   node --import tsx bench/events.ts [--seconds 5] [--rate 250,1000] [--backlog 100000] [--postgres]
//     [--webhook-concurrency <n>] [--relay idle,hanging,throughput,outage] [--hanging 30,1000]
//     [--throughput 30000] [--outage 8]
// (--rate 0: the backlog measure alone; --backlog 0: without it; --webhook-concurrency: the
// service's PETSTORE_WEBHOOK_CONCURRENCY, its default without it; --relay none: no relay measure).
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, request as httpRequest } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { CONNECTIONS } from './load.js';
import { deliveriesAt, runPetstore, startReceiver, startService, type Delivered } from './processes.js';
import { RELAY_PLAN, runRelayMeasures, type RelayPlan } from './relay.js';
import { renderBacklog, renderEvents, renderRelay, type BacklogRun, type EventsRun } from './report.js';
import { POSTGRES_URL, reachable, seedPostgres, seedSqlite, writeEvents, type Seeded } from './seed.js';

/** One 201: when it arrived (`Date.now()`) and the created pet's id. */
export interface Created {
  at: number;
  pet: string;
}

/** The `p` quantile of `sorted` (ascending), nearest rank; NaN when empty. */
export function quantile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

/**
 * The figures of one run: each 201 matched with its event's first delivery by the pet's id (in
 * the event's data). `start` is when the first create was sent; the creates' window ends at the
 * last 201. Deliveries of pets not in `created` (the warm-up's) are not counted.
 */
export function eventFigures(
  created: Created[],
  delivered: Delivered[],
  start: number,
): Omit<EventsRun, 'store' | 'rate' | 'seconds' | 'failed'> {
  const first = new Map<string, number>();
  let duplicates = 0;
  const wanted = new Set(created.map((c) => c.pet));
  for (const d of delivered) {
    if (d.pet === null || !wanted.has(d.pet)) continue;
    const seen = first.get(d.pet);
    if (seen === undefined) first.set(d.pet, d.at);
    else {
      duplicates += 1;
      if (d.at < seen) first.set(d.pet, d.at);
    }
  }
  // reduce, not Math.max(...): a long run's thousands of arguments would overflow the stack.
  const end = created.reduce((last, c) => Math.max(last, c.at), start);
  const lags = created
    .filter((c) => first.has(c.pet))
    .map((c) => first.get(c.pet)! - c.at)
    .sort((a, b) => a - b);
  const arrivals = [...first.values()];
  const during = arrivals.filter((at) => at <= end).length;
  const missing = created.length - first.size;
  return {
    created: created.length,
    madeRate: created.length / ((end - start) / 1000 || 1),
    delivered: first.size,
    duplicates,
    missing,
    deliveredRate: during / ((end - start) / 1000 || 1),
    drainMs: missing === 0 ? arrivals.reduce((last, at) => Math.max(last, at), end) - end : NaN,
    lagP50Ms: quantile(lags, 0.5),
    lagP99Ms: quantile(lags, 0.99),
  };
}

// Creates in flight at most (the agent queues those past its connections): past it the driver
// waits, and the rate made falls below the rate asked.
const MOST_IN_FLIGHT = 256;
const TICK_MS = 5;

/** POST /v1/pets at `rate` a second for `seconds`, open loop (each on time, not after the last answer). */
async function createAtRate(
  url: string,
  key: string,
  rate: number,
  seconds: number,
): Promise<{ created: Created[]; failed: number; start: number }> {
  const created: Created[] = [];
  let failed = 0;
  let sent = 0;
  let inFlight = 0;
  const pending = new Set<Promise<void>>();
  // Keep-alive connections, as many as wrk opens: the service caps one address's connections.
  const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
  const create = () =>
    new Promise<void>((resolve) => {
      const fail = () => {
        failed += 1;
        resolve();
      };
      const request = httpRequest(
        `${url}/v1/pets`,
        {
          method: 'POST',
          agent,
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
          timeout: 10_000,
        },
        (response) => {
          let text = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (text += chunk));
          response.on('error', fail);
          response.on('end', () => {
            const pet = /"id":([0-9]+)/.exec(text)?.[1];
            if (response.statusCode !== 201 || pet === undefined) return fail();
            created.push({ at: Date.now(), pet });
            resolve();
          });
        },
      );
      request.on('timeout', () => request.destroy(new Error('timed out')));
      request.on('error', fail);
      request.end('{"name":"Rex","categoryId":7}');
    });
  const start = Date.now();
  const total = Math.round(rate * seconds);
  while (sent < total && Date.now() - start < seconds * 1000 + 10_000) {
    const due = Math.min(total, Math.floor(((Date.now() - start) / 1000) * rate) + 1);
    while (sent < due && inFlight < MOST_IN_FLIGHT) {
      sent += 1;
      inFlight += 1;
      const running: Promise<void> = create().finally(() => {
        inFlight -= 1;
        pending.delete(running);
      });
      pending.add(running);
    }
    await sleep(TICK_MS);
  }
  await Promise.all(pending);
  agent.destroy();
  return { created, failed: failed + (total - sent), start };
}

/** Waits until every pet of `created` has a delivery, or `ms` have passed. */
async function drained(receiverUrl: string, created: Created[], ms: number): Promise<Delivered[]> {
  const deadline = Date.now() + ms;
  const wanted = new Set(created.map((c) => c.pet));
  for (;;) {
    const received = await deliveriesAt(receiverUrl);
    const got = new Set(received.filter((d) => d.pet !== null && wanted.has(d.pet)).map((d) => d.pet));
    if (got.size === wanted.size || Date.now() > deadline) return received;
    await sleep(50);
  }
}

// How long the backlog may take to drain before the run counts what is still missing.
const DRAIN_LIMIT_MS = 60_000;

/**
 * The events row on `store`: a receiver on CPU `receiverCpu`, registered with `petstore webhooks
 * add` on the store `seeded` (fresh, used by nothing else: every relay on it delivers), the
 * service as shipped plus PETSTORE_WEBHOOK_ALLOW_HTTP=127.0.0.1 on `serverCpu`; `warmup` s of
 * creates (delivered, not counted), then `seconds` s at `rate` creates a second. `concurrency`
 * sets PETSTORE_WEBHOOK_CONCURRENCY; without it, the shipped default.
 */
export async function runEvents(
  store: EventsRun['store'],
  seeded: Seeded,
  {
    rate,
    seconds,
    warmup,
    serverCpu,
    receiverCpu,
    logFile,
    concurrency,
  }: {
    rate: number;
    seconds: number;
    warmup: number;
    serverCpu?: number;
    receiverCpu?: number;
    logFile: string;
    concurrency?: number;
  },
): Promise<EventsRun> {
  const receiver = await startReceiver(receiverCpu);
  const env: Record<string, string> = { ...seeded.env, PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1' };
  if (concurrency !== undefined) env.PETSTORE_WEBHOOK_CONCURRENCY = String(concurrency);
  try {
    runPetstore(['webhooks', 'add', `${receiver.url}/petstore`, '--description', 'bench receiver', '--json'], env);
    const service = await startService(`${store} events`, env, serverCpu, logFile);
    try {
      const warm = await createAtRate(service.url, seeded.key, rate, warmup);
      await drained(receiver.url, warm.created, DRAIN_LIMIT_MS);
      const run = await createAtRate(service.url, seeded.key, rate, seconds);
      const received = await drained(receiver.url, run.created, DRAIN_LIMIT_MS);
      if (service.child.exitCode !== null) throw new Error(`${service.name} exited:\n${service.output()}`);
      return { store, rate, seconds, failed: run.failed, ...eventFigures(run.created, received, run.start) };
    } finally {
      await service.stop();
    }
  } finally {
    await receiver.stop();
  }
}

/** Events written for the backlog measure: what a long outage of a receiver leaves waiting. */
export const BACKLOG_EVENTS = 100_000;
/** Events written first: a backlog too small to matter (the relay hands out 100 at a time: src/events/relay.ts). */
const BACKLOG_FEW = 1_000;
// RSS is read once a second for this many seconds, /metrics scraped before each reading; the
// median is reported.
const BACKLOG_SAMPLES = 5;
// Before each reading of a phase with events waiting, /metrics is scraped each second for this
// long: the relay's attempts to the hanging receiver time out (PETSTORE_WEBHOOK_TIMEOUT_MS, 10 s)
// and are retried meanwhile, so both phases are read with the relay in the same state.
const BACKLOG_SETTLE_S = 20;

/** The median of `values`, ignoring undefined; undefined when none is left. */
function medianOf(values: (number | undefined)[]): number | undefined {
  const sorted = values.filter((v): v is number => v !== undefined).sort((a, b) => a - b);
  return sorted.length === 0 ? undefined : sorted[Math.floor((sorted.length - 1) / 2)];
}

/**
 * The backlog measure on `store`: the service as shipped, on the store `seeded` (fresh), one
 * endpoint added at a receiver that never answers; its RSS with no event waiting, then with
 * BACKLOG_FEW events written straight into the store (the service running meanwhile: the relay
 * now holds an attempt to the receiver, then probes it on its back-off), then with `events`. /metrics
 * is scraped each second throughout, so what its gauges cost is in the figures. The backlog's own
 * cost is the last against the second; against the first, the relay at work counts too.
 */
export async function runBacklog(
  store: BacklogRun['store'],
  seeded: Seeded,
  {
    events = BACKLOG_EVENTS,
    serverCpu,
    receiverCpu,
    logFile,
  }: { events?: number; serverCpu?: number; receiverCpu?: number; logFile: string },
): Promise<BacklogRun> {
  const few = Math.min(BACKLOG_FEW, events);
  const receiver = await startReceiver(receiverCpu, { hang: true });
  const env = { ...seeded.env, PETSTORE_WEBHOOK_ALLOW_HTTP: '127.0.0.1' };
  try {
    runPetstore(['webhooks', 'add', `${receiver.url}/hook`, '--description', 'hanging receiver', '--json'], env);
    const service = await startService(`${store} backlog`, env, serverCpu, logFile);
    try {
      let waiting = NaN;
      const scrape = async () => {
        const response = await fetch(`${service.url}/metrics`, { headers: { authorization: `Bearer ${seeded.key}` } });
        const text = await response.text();
        if (response.status !== 200) throw new Error(`/metrics answered ${response.status}: ${text}`);
        waiting = Number(/^petstore_webhook_events_waiting (\S+)$/m.exec(text)?.[1] ?? NaN);
      };
      const settle = async (seconds: number) => {
        for (let i = 0; i < seconds; i++) {
          await scrape();
          await sleep(1000);
        }
      };
      const sample = async () => {
        const rss: (number | undefined)[] = [];
        for (let i = 0; i < BACKLOG_SAMPLES; i++) {
          await scrape();
          await sleep(1000);
          rss.push(service.rss());
        }
        return medianOf(rss);
      };
      // Warm first: the service's first seconds settle its memory (a look, a scrape, the JIT).
      await settle(BACKLOG_SAMPLES);
      const rssNone = await sample();
      const seenNone = waiting;
      // A batch first: the relay as busy as with any backlog (its attempt held, then retried; an
      // endpoint that has not answered holds one slot).
      await writeEvents(seeded, few);
      const deadline = Date.now() + 30_000;
      while (Number(await (await fetch(`${receiver.url}/count`)).text()) < 1) {
        if (Date.now() > deadline) throw new Error(`the relay did not reach the receiver:\n${service.output()}`);
        await sleep(100);
      }
      await settle(BACKLOG_SETTLE_S);
      const rssFew = await sample();
      const seenFew = waiting;
      service.resetPeak();
      await writeEvents(seeded, events - few);
      await settle(BACKLOG_SETTLE_S);
      const rssWaiting = await sample();
      if (service.child.exitCode !== null) throw new Error(`${service.name} exited:\n${service.output()}`);
      return {
        store,
        events,
        few,
        readings: BACKLOG_SAMPLES,
        settleSeconds: BACKLOG_SETTLE_S,
        waitingNone: seenNone,
        waitingFew: seenFew,
        waitingSeen: waiting,
        attempts: Number(await (await fetch(`${receiver.url}/count`)).text()),
        rssNone,
        rssFew,
        rssWaiting,
        peakWaiting: service.peakRss(),
      };
    } finally {
      await service.stop();
    }
  } finally {
    await receiver.stop();
  }
}

/** The relay measures the command line asks for (--relay, --hanging, --throughput, --outage). */
export function relayPlan(values: {
  relay?: string;
  hanging?: string;
  throughput?: string;
  outage?: string;
}): RelayPlan {
  const measures = (values.relay ?? '').split(',').filter((m) => m !== '' && m !== 'none');
  for (const measure of measures) {
    if (!(RELAY_PLAN.measures as string[]).includes(measure)) {
      throw new Error(`--relay takes ${RELAY_PLAN.measures.join(', ')} or none, comma-separated (got ${measure})`);
    }
  }
  return {
    measures: measures as RelayPlan['measures'],
    hanging: (values.hanging ?? RELAY_PLAN.hanging.join(',')).split(',').map(Number),
    throughputEvents: Number(values.throughput ?? RELAY_PLAN.throughputEvents),
    outageSeconds: Number(values.outage ?? RELAY_PLAN.outageSeconds),
  };
}

/**
 * `run` on a fresh store of each kind, each seeded with 10,000 pets: a SQLite file in `folder`,
 * then, when `postgres`, a PostgreSQL schema of its own, dropped after. Every service on a store
 * runs a relay, so each events run and backlog measure has a store no other service uses.
 */
export async function onEachStore<T>(
  { folder, name, postgres }: { folder: string; name: string; postgres: boolean },
  run: (store: EventsRun['store'], seeded: Seeded) => Promise<T>,
): Promise<T[]> {
  const results = [await run('SQLite', seedSqlite(join(folder, `${name}.db`), 10_000))];
  if (postgres) {
    const pg = await seedPostgres(POSTGRES_URL, `petstore_bench_${name.replace(/\W/g, '_')}_${process.pid}`, 10_000);
    try {
      results.push(await run('PostgreSQL', pg));
    } finally {
      await pg.drop();
    }
  }
  return results;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { values } = parseArgs({
    options: {
      seconds: { type: 'string', default: '5' },
      rate: { type: 'string', default: '250,1000' },
      backlog: { type: 'string', default: String(BACKLOG_EVENTS) },
      postgres: { type: 'boolean', default: false },
      'webhook-concurrency': { type: 'string' },
      relay: { type: 'string', default: RELAY_PLAN.measures.join(',') },
      hanging: { type: 'string', default: RELAY_PLAN.hanging.join(',') },
      throughput: { type: 'string', default: String(RELAY_PLAN.throughputEvents) },
      outage: { type: 'string', default: String(RELAY_PLAN.outageSeconds) },
    },
  });
  const temp = mkdtempSync(join(tmpdir(), 'petstore-bench-events-'));
  const runs: EventsRun[] = [];
  const backlogs: BacklogRun[] = [];
  const concurrency = values['webhook-concurrency'];
  const options = {
    seconds: Number(values.seconds),
    warmup: 1,
    concurrency: concurrency ? Number(concurrency) : undefined,
  };
  const postgres = Boolean(values.postgres && (await reachable(POSTGRES_URL)));
  const logFile = (store: string, name: string) => join(temp, `${store}-${name}.log`);
  try {
    for (const rate of values.rate
      .split(',')
      .map(Number)
      .filter((rate) => rate > 0)) {
      runs.push(
        ...(await onEachStore({ folder: temp, name: `events-${rate}`, postgres }, (store, seeded) =>
          runEvents(store, seeded, { ...options, rate, logFile: logFile(store, `${rate}`) }),
        )),
      );
    }
    const events = Number(values.backlog);
    if (events > 0) {
      backlogs.push(
        ...(await onEachStore({ folder: temp, name: 'backlog', postgres }, (store, seeded) =>
          runBacklog(store, seeded, { events, logFile: logFile(store, 'backlog') }),
        )),
      );
    }
    const plan = relayPlan(values);
    const relay = plan.measures.length
      ? await runRelayMeasures(plan, (name, run) => onEachStore({ folder: temp, name, postgres }, run), {
          logFile: (name) => logFile('relay', name),
          log: (line) => process.stderr.write(`${line}\n`),
        })
      : undefined;
    const lines = [
      ...(runs.length ? renderEvents(runs) : []),
      ...(backlogs.length ? ['', ...renderBacklog(backlogs)] : []),
      ...(relay ? renderRelay(relay) : []),
    ];
    process.stdout.write(`${lines.join('\n').trim()}\n`);
  } finally {
    rmSync(temp, { recursive: true, force: true });
  }
}
