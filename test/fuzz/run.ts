import fc from 'fast-check';
import { isLosslessNumber, parse } from 'lossless-json';
import type { Store } from '../../src/store/store.js';
import { toCurl, toNetcat } from './curl.js';
import type { DocumentChecker, WireResponse } from './document.js';
import { plannedRequest, type PlannedRequest } from './requests.js';
import { serialize, type ConcreteRequest, type Transport } from './transport.js';

export interface FuzzTarget {
  transport: Transport;
  store: Store;
  checker: DocumentChecker;
  key: string;
  /** A second API key, for reading animals back without spending the first key's rate limit. */
  readerKey: string;
  /** Where a replayed curl command should point. */
  base: string;
  /** Called before each request: lets a manual clock move on. */
  tick?: () => void;
}

export interface FuzzFigures {
  seed: number;
  runs: number;
  durationMs: number;
  statuses: Record<string, number>;
  /** 201s whose animal was read back with exactly the fields sent. */
  createdAndReadBack: number;
  /** 4xx answers after which the stored animals were compared and found unchanged. */
  refusedAndUnchanged: number;
  serverErrors: number;
}

export interface FuzzOutcome {
  figures: FuzzFigures;
  /** The shrunk counterexample, as a curl command and what was wrong; undefined when none. */
  failure?: string;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/** The exact integer a JSON number's text denotes, or undefined when it is not an integer. */
export function exactInteger(text: string): bigint | undefined {
  const match = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?$/.exec(text);
  if (!match) return undefined;
  const [, sign, whole, fraction = '', exponent = '0'] = match;
  const scale = Number(exponent) - fraction.length;
  if (Math.abs(scale) > 400) return /^0*$/.test(whole! + fraction) ? 0n : undefined;
  const digits = BigInt(whole! + fraction);
  if (scale >= 0) return BigInt(sign + '1') * digits * 10n ** BigInt(scale);
  const divisor = 10n ** BigInt(-scale);
  return digits % divisor === 0n ? BigInt(sign + '1') * (digits / divisor) : undefined;
}

interface PetFields {
  name: unknown;
  categoryId: bigint | undefined;
  status: unknown;
}

function readPet(text: string): PetFields & { id: bigint | undefined; keys: string[] } {
  const value = parse(text) as Record<string, unknown>;
  const integer = (n: unknown) => (isLosslessNumber(n) ? exactInteger(n.value) : undefined);
  return {
    id: integer(value.id),
    name: value.name,
    categoryId: integer(value.categoryId),
    status: value.status,
    keys: Object.keys(value).sort(),
  };
}

const row = (pet: { id: unknown; name: unknown; categoryId: unknown; status: unknown }) =>
  `${pet.id}\t${pet.name}\t${pet.categoryId}\t${pet.status}`;

async function snapshot(store: Store): Promise<string[]> {
  return (await store.listPets({ limit: 1_000_000 })).map(row);
}

/** The key an Idempotency-Key value names: bare, or a quoted string (docs/api.md#safe-retries-idempotency-key). */
function idempotencyKeyOf(value: string | undefined): string | undefined {
  if (value === undefined) return undefined;
  const trimmed = value.trim();
  const quoted = /^"((?:[^"\\]|\\.)*)"$/.exec(trimmed);
  return quoted ? quoted[1]!.replace(/\\(.)/g, '$1') : trimmed;
}

/**
 * What is wrong with an answer to a create with an Idempotency-Key, given the first 201 of
 * each key so far: a key replays only after a 201, replays that 201 exactly, and a refused
 * first request is not remembered, so a 422 needs an earlier 201.
 */
function checkIdempotency(firsts: Map<string, string>, key: string, response: WireResponse): string | undefined {
  const first = firsts.get(key);
  const replayed = response.headers['idempotent-replayed'] === 'true';
  if (response.status === 201 && !replayed) {
    if (first !== undefined) return `Idempotency-Key ${key} created a second animal instead of replaying ${first}`;
    firsts.set(key, response.body);
  }
  if (response.status === 201 && replayed && first !== response.body) {
    return `Idempotency-Key ${key} replayed ${response.body}, but its first answer was ${first}`;
  }
  if (response.status === 422 && first === undefined) {
    return `422 for Idempotency-Key ${key}, which no 201 used: a refused request was remembered`;
  }
  return undefined;
}

/** Fields that must be the same on a HEAD and on the GET it stands for (RFC 9110 section 9.3.2). */
const SAME_FOR_HEAD = ['content-type', 'content-length', 'link', 'allow', 'deprecation', 'sunset', 'www-authenticate'];

/** What differs between the answer to a HEAD and to the same request as GET, if anything. */
async function checkHead(target: FuzzTarget, request: ConcreteRequest, head: WireResponse) {
  const get = await target.transport.send({ ...request, method: 'GET' });
  // Rate limits count the GET too, so either may be the one past the limit.
  if (get.status === 429 || head.status === 429) return undefined;
  if (get.status !== head.status) return `HEAD answered ${head.status}, GET ${get.status}`;
  const differs = SAME_FOR_HEAD.find((name) => head.headers[name] !== get.headers[name]);
  return differs && `HEAD and GET differ in ${differs}: ${head.headers[differs]} / ${get.headers[differs]}`;
}

function fill(plan: PlannedRequest, key: string, ids: bigint[], cursors: string[]): ConcreteRequest {
  const pick = <T>(list: T[], n: string, fallback: T) => (list.length ? list[Number(n) % list.length]! : fallback);
  const text = (value: string) =>
    value
      .replace(/\{\{key\}\}/g, key)
      .replace(/\{\{id:([0-9]+)\}\}/g, (_, n: string) => String(pick(ids, n, 1n)))
      .replace(/\{\{cursor:([0-9]+)\}\}/g, (_, n: string) => pick(cursors, n, 'OjE'));
  const headers = Object.fromEntries(Object.entries(plan.headers).map(([name, value]) => [name, text(value)]));
  return {
    method: plan.method,
    url: text(plan.url),
    headers,
    ...(plan.body !== undefined && { body: plan.body }),
    ...(plan.wire !== undefined && { wire: plan.wire }),
  };
}

/** What is wrong with a 201 from createPet: the animal must read back with exactly the fields sent. */
async function checkCreated(
  target: FuzzTarget,
  request: ConcreteRequest,
  response: WireResponse,
): Promise<string | undefined> {
  let sent: Record<string, unknown>;
  try {
    sent = parse(Buffer.from(request.body ?? []).toString('utf8')) as Record<string, unknown>;
  } catch (error) {
    return `201 for a body that is not one JSON object: ${(error as Error).message}`;
  }
  const expected: PetFields = {
    name: sent.name,
    categoryId: isLosslessNumber(sent.categoryId) ? exactInteger(sent.categoryId.value) : undefined,
    status: sent.status ?? 'available',
  };
  if (expected.categoryId === undefined || expected.categoryId < INT64_MIN || expected.categoryId > INT64_MAX) {
    return `201 for a categoryId that is not an int64: ${String(sent.categoryId)}`;
  }
  const created = readPet(response.body);
  if (response.headers['location'] !== `/v1/pets/${created.id}`) {
    return `Location ${response.headers['location']} does not name the new animal ${created.id}`;
  }
  const read = await target.transport.send({
    method: 'GET',
    url: `/v1/pets/${created.id}`,
    headers: { authorization: `Bearer ${target.readerKey}` },
  });
  if (read.status !== 200) return `the new animal ${created.id} reads back as ${read.status}: ${read.body}`;
  for (const [what, pet] of [
    ['201 body', created],
    ['getPet body', readPet(read.body)],
  ] as const) {
    const fields: (keyof PetFields)[] = ['name', 'categoryId', 'status'];
    for (const field of fields) {
      if (pet[field] !== expected[field]) {
        return `${what} has ${field} ${String(pet[field])}, but ${String(expected[field])} was sent`;
      }
    }
    if (pet.id !== created.id) return `${what} has id ${pet.id}, the 201 said ${created.id}`;
  }
  return undefined;
}

/**
 * Runs generated requests against `target`, one at a time or in concurrent batches, and checks
 * every answer: no 5xx; the status is listed for the operation and the body matches its schema
 * in the served document; a 201 from createPet reads back with exactly the fields sent; the
 * stored animals change by exactly what the 201s created, so no 4xx stores anything. One at a
 * time, also: a HEAD answers as its GET, and a refused request is not remembered for its
 * Idempotency-Key. Stops at the first failure and shrinks it to a minimal request.
 */
export async function fuzz(
  target: FuzzTarget,
  options: { seed: number; runs: number; timeLimitMs: number; concurrency?: number },
) {
  const concurrency = options.concurrency ?? 1;
  const figures: FuzzFigures = {
    seed: options.seed,
    runs: 0,
    durationMs: 0,
    statuses: {},
    createdAndReadBack: 0,
    refusedAndUnchanged: 0,
    serverErrors: 0,
  };
  const ids: bigint[] = [];
  const cursors: string[] = [];
  let last: ConcreteRequest[] | undefined;
  const firstAnswers = new Map<string, string>();
  // The stored animals as last read: what the next request starts from.
  let stored = await snapshot(target.store);

  // One request at a time, or batches sent at once: then the races are what is tried.
  const batches =
    concurrency > 1
      ? fc.array(plannedRequest, { minLength: 2, maxLength: concurrency })
      : plannedRequest.map((plan) => [plan]);
  const sequential = concurrency <= 1;

  const property = fc.asyncProperty(batches, async (plans) => {
    target.tick?.();
    const requests = (last = plans.map((plan) => fill(plan, target.key, ids, cursors)));
    const responses = await Promise.all(requests.map((request) => target.transport.send(request)));
    const before = stored;
    const after = (stored = await snapshot(target.store));
    const created: string[] = [];
    for (const [i, request] of requests.entries()) {
      const response = responses[i]!;
      figures.runs += 1;
      figures.statuses[response.status] = (figures.statuses[response.status] ?? 0) + 1;
      if (response.status >= 500) figures.serverErrors += 1;
      const received = target.transport.received(request);
      const problem = target.checker.check(received.method, received.url, response);
      if (problem) throw new Error(problem);

      const operation = target.checker.operationFor(received.method, received.url)?.operationId;
      const next = /<[^>]*[?&]cursor=([^&>]+)[^>]*>; rel="next"/.exec(response.headers['link'] ?? '');
      if (next) cursors.push(next[1]!);
      if (sequential && received.method === 'HEAD') {
        const wrong = await checkHead(target, request, response);
        if (wrong) throw new Error(wrong);
      }
      const idempotencyKey = idempotencyKeyOf(request.headers['idempotency-key']);
      if (sequential && operation === 'createPet' && idempotencyKey !== undefined) {
        const wrong = checkIdempotency(firstAnswers, idempotencyKey, response);
        if (wrong) throw new Error(wrong);
      }
      if (operation === 'createPet' && response.status === 201) {
        const wrong = await checkCreated(target, request, response);
        if (wrong) throw new Error(wrong);
        const pet = readPet(response.body);
        if (response.headers['idempotent-replayed'] !== 'true') created.push(row(pet));
        ids.push(pet.id!);
        figures.createdAndReadBack += 1;
      } else if (response.status >= 400) {
        figures.refusedAndUnchanged += 1;
      }
    }
    // The stored animals changed by exactly what the 201s created: nothing else stored anything.
    const expected = [...before, ...created].sort((x, y) =>
      BigInt(x.split('\t')[0]!) < BigInt(y.split('\t')[0]!) ? -1 : 1,
    );
    if (after.join('\n') !== expected.join('\n')) {
      const answers = responses.map((response) => response.status).join(', ');
      throw new Error(
        `the stored animals went from ${before.length} to ${after.length}, but the answers (${answers}) created ${created.length}`,
      );
    }
  });

  const started = performance.now();
  const details = await fc.check(property, {
    seed: options.seed,
    numRuns: options.runs,
    interruptAfterTimeLimit: options.timeLimitMs,
    markInterruptAsFailure: false,
  });
  figures.durationMs = Math.round(performance.now() - started);
  if (!details.failed) return { figures } satisfies FuzzOutcome;

  const plans = details.counterexample?.[0];
  const requests = plans ? plans.map((plan) => fill(plan, target.key, ids, cursors)) : (last ?? []);
  const replay = requests.map((request) =>
    request.wire && target.transport.faults
      ? toNetcat(target.base, serialize(request)).split(target.key).join('\'"$PETSTORE_KEY"\'')
      : toCurl(target.base, request, target.key),
  );
  const failure = [
    `fuzz failure after ${details.numRuns} runs (seed ${options.seed}, path ${details.counterexamplePath}, ${details.numShrinks} shrinks):`,
    `  ${details.errorInstance instanceof Error ? details.errorInstance.message : String(details.errorInstance)}`,
    `replay (PETSTORE_KEY holding a valid key${requests.length > 1 ? '; these were sent at once' : ''}):`,
    ...replay.map((line) => `  ${line}`),
    `rerun: PETSTORE_FUZZ_SEED=${options.seed} node --import tsx --test test/fuzz.test.ts`,
  ].join('\n');
  return { figures, failure } satisfies FuzzOutcome;
}
