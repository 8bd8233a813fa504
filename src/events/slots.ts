import { retryDelay } from './retries.js';

/**
 * How an endpoint has answered lately: `up` (its last attempt succeeded), `unproven` (none has
 * succeeded yet, or its last failed) or `down` (DOWN_AFTER attempts in a row failed: it is only
 * probed, one attempt at a time, on its back-off).
 */
export type Health = 'up' | 'unproven' | 'down';

/** Failed attempts in a row, with no success between them, after which an endpoint is down. */
export const DOWN_AFTER = 2;

/** An endpoint's health from what the store keeps of it: its failures in a row, and whether any attempt succeeded. */
export function healthOf({ failures, succeeded }: { failures: number; succeeded: boolean }): Health {
  if (failures >= DOWN_AFTER) return 'down';
  return failures === 0 && succeeded ? 'up' : 'unproven';
}

/**
 * The slots kept for endpoints that are up: those that are not never hold them, so however many
 * endpoints hang, fail or have not answered yet, one that answers has slots
 * (docs/webhooks.md#isolation).
 *
 * @example reserveOf(64) // 16
 */
export function reserveOf(concurrency: number): number {
  return Math.floor(concurrency / 4);
}

/** One endpoint as a relay sees it when it chooses what to attempt next. */
export interface EndpointTurn {
  id: number;
  health: Health;
  /** Attempts this relay holds for it: leased, and not yet recorded. */
  inFlight: number;
  /** The most it may hold by its answers so far (pace.ts); at least 1. */
  window: number;
  /** Down: not probed before then (Unix ms); null: at once. */
  probeAt: number | null;
  /** It may have deliveries due: events were written, a retry came due, or its last claim was not short. */
  pending: boolean;
  /** When it was last given a slot: among endpoints holding as many, the one waiting longest goes first. */
  servedAt: number;
}

/** Attempts to lease for one endpoint. */
export interface Allotment {
  endpointId: number;
  count: number;
  /** A probe of an endpoint that is down: its oldest delivery waiting, whatever that one's own retry time. */
  probe: boolean;
}

/**
 * The most any one endpoint may hold when `slots` are shared max-min fairly among endpoints that
 * would hold `demands`: those that want less than an even share leave the rest to the others.
 * Never less than one; Infinity when every demand fits.
 *
 * @example shareOf([1, 1, 40], 16) // 14
 */
export function shareOf(demands: readonly number[], slots: number): number {
  const sorted = demands.filter((demand) => demand > 0).sort((a, b) => a - b);
  let left = slots;
  for (const [i, demand] of sorted.entries()) {
    const even = left / (sorted.length - i);
    if (demand > even) return Math.max(1, Math.floor(even));
    left -= demand;
  }
  return Infinity;
}

/** The most `endpoint` may hold now, before any share: one probe when down and due, else its window. */
function demandOf(endpoint: EndpointTurn, now: number): number {
  if (endpoint.health !== 'down') return endpoint.window;
  return endpoint.probeAt === null || endpoint.probeAt <= now ? 1 : 0;
}

/** The shares of the endpoints that are up and of the others (docs/webhooks.md#isolation). */
export function sharesOf(
  endpoints: readonly EndpointTurn[],
  { concurrency, now }: { concurrency: number; now: number },
): { up: number; others: number } {
  // What each would hold: more if it may have work, what it holds if not.
  const held = (endpoint: EndpointTurn) => (endpoint.pending ? demandOf(endpoint, now) : endpoint.inFlight);
  const others = endpoints.filter((endpoint) => endpoint.health !== 'up').map(held);
  const otherSlots = concurrency - reserveOf(concurrency);
  const othersUse = Math.min(
    otherSlots,
    others.reduce((sum, n) => sum + n, 0),
  );
  const up = endpoints.filter((endpoint) => endpoint.health === 'up').map(held);
  return { up: shareOf(up, concurrency - othersUse), others: shareOf(others, otherSlots) };
}

/** A candidate's place in the turns: fewest held first, then the one waiting longest, then the id. */
const before = (a: Candidate, b: Candidate) => a.held - b.held || a.servedAt - b.servedAt || a.id - b.id;

interface Candidate {
  id: number;
  held: number;
  servedAt: number;
  wants: number;
  given: number;
  up: boolean;
  probe: boolean;
}

/**
 * What a relay attempts next (docs/webhooks.md#isolation): how many deliveries to lease for each
 * endpoint, the free slots of `concurrency` given one at a time to the endpoint holding the
 * fewest (then the one served longest ago). An endpoint gets no more than its window (pace.ts)
 * and its share (sharesOf); one that is down gets a single probe, once its back-off has passed
 * and none is in flight; endpoints that are not up together hold at most `concurrency` less
 * reserveOf(concurrency). Endpoints with nothing pending get nothing.
 *
 * @example allotSlots([{ id: 1, health: 'up', inFlight: 0, window: 4, probeAt: null, pending: true, servedAt: 0 }],
 *   { concurrency: 8, now: 0 }) // [{ endpointId: 1, count: 4, probe: false }]
 */
export function allotSlots(
  endpoints: readonly EndpointTurn[],
  { concurrency, now }: { concurrency: number; now: number },
): Allotment[] {
  let free = concurrency - endpoints.reduce((sum, endpoint) => sum + endpoint.inFlight, 0);
  if (free <= 0) return [];
  const shares = sharesOf(endpoints, { concurrency, now });
  let othersRoom =
    concurrency -
    reserveOf(concurrency) -
    endpoints.reduce((sum, endpoint) => sum + (endpoint.health === 'up' ? 0 : endpoint.inFlight), 0);
  const heap: Candidate[] = [];
  for (const endpoint of endpoints) {
    if (!endpoint.pending) continue;
    const up = endpoint.health === 'up';
    const most = Math.min(demandOf(endpoint, now), up ? shares.up : shares.others);
    const wants = endpoint.health === 'down' && endpoint.inFlight > 0 ? 0 : most - endpoint.inFlight;
    if (wants <= 0) continue;
    const { id, inFlight: held, servedAt } = endpoint;
    push(heap, { id, held, servedAt, wants, given: 0, up, probe: endpoint.health === 'down' });
  }
  const given: Candidate[] = [];
  while (free > 0 && heap.length > 0) {
    const next = pop(heap);
    if (!next.up && othersRoom <= 0) continue;
    if (next.given === 0) given.push(next);
    next.given += 1;
    next.held += 1;
    next.wants -= 1;
    free -= 1;
    if (!next.up) othersRoom -= 1;
    if (next.wants > 0) push(heap, next);
  }
  return given.map(({ id, given: count, probe }) => ({ endpointId: id, count, probe }));
}

function push(heap: Candidate[], item: Candidate) {
  let i = heap.push(item) - 1;
  while (i > 0) {
    const parent = (i - 1) >> 1;
    if (before(heap[parent]!, item) <= 0) break;
    heap[i] = heap[parent]!;
    i = parent;
  }
  heap[i] = item;
}

function pop(heap: Candidate[]): Candidate {
  const top = heap[0]!;
  const last = heap.pop()!;
  if (heap.length === 0) return top;
  let i = 0;
  for (;;) {
    const left = 2 * i + 1;
    if (left >= heap.length) break;
    const right = left + 1;
    const child = right < heap.length && before(heap[right]!, heap[left]!) < 0 ? right : left;
    if (before(last, heap[child]!) <= 0) break;
    heap[i] = heap[child]!;
    i = child;
  }
  heap[i] = last;
  return top;
}

/** What the store keeps of an endpoint's recent answers (the columns failures and probe_at). */
export interface EndpointBackoff {
  /** Failed attempts in a row, with no success between them. */
  failures: number;
  /** Down: not probed before then (Unix ms); null when not down. */
  probeAt: number | null;
}

/**
 * An endpoint's back-off after one more attempt ended (docs/webhooks.md#retries): a success
 * clears it, and when the endpoint was down, releases every delivery waiting for it (due at
 * once, oldest first); a failure counts one more in a row, and from DOWN_AFTER on the endpoint
 * is probed after retryDelay of that count (the schedule of one event alone), or at the retry of
 * the event just tried, whichever comes first, so an event's last attempt is still made when its
 * give-up period ends. `jitter` is the attempt's random draw, 0 to 1.
 *
 * @example endpointAfter({ failures: 1, probeAt: null }, { ok: false, at: 0, retryAt: 7_500, jitter: 0.5 }, 5000)
 * // { failures: 2, probeAt: 7_500, released: false }
 */
export function endpointAfter(
  { failures }: EndpointBackoff,
  { ok, at, retryAt, jitter }: { ok: boolean; at: number; retryAt: number | undefined; jitter: number },
  retryMs: number,
): EndpointBackoff & { released: boolean } {
  if (ok) return { failures: 0, probeAt: null, released: failures >= DOWN_AFTER };
  const next = failures + 1;
  if (next < DOWN_AFTER) return { failures: next, probeAt: null, released: false };
  const backoff = at + retryDelay(next, retryMs, () => jitter);
  return { failures: next, probeAt: retryAt === undefined ? backoff : Math.min(backoff, retryAt), released: false };
}
