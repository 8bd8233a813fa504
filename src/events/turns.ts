import type { ClaimedDelivery, RelayEndpoint } from '../store/webhooks.js';
import { firstWindow, nextWindow } from './pace.js';
import { healthOf, type Allotment, type EndpointTurn } from './slots.js';

interface Turn extends EndpointTurn {
  /** The earliest retry this relay scheduled for it (Unix ms); null: none. */
  retryAt: number | null;
}

/**
 * A relay's view of the enabled endpoints, the data allotSlots decides on (slots.ts): their
 * health and back-off as the store last said, and what this relay knows itself: the attempts it
 * holds for each, its window, whether it may have deliveries due, and when a retry comes due.
 */
export function endpointTurns() {
  const turns = new Map<number, Turn>();
  const toTurn = (endpoint: RelayEndpoint, now: number): Turn => {
    const health = healthOf(endpoint);
    return {
      id: endpoint.id,
      health,
      inFlight: 0,
      window: firstWindow(health),
      probeAt: endpoint.probeAt,
      pending: true,
      servedAt: now,
      retryAt: null,
    };
  };
  const update = (turn: Turn, { failures, probeAt, succeeded }: RelayEndpoint) => {
    const health = healthOf({ failures, succeeded });
    // An endpoint that has just come up starts from the window of one known to be up.
    if (health === 'up' && turn.health !== 'up') turn.window = Math.max(turn.window, firstWindow(health));
    turn.health = health;
    turn.probeAt = probeAt;
  };

  return {
    /** The store's endpoints now: new ones added, gone ones dropped (once none of their attempts is held). */
    refresh(endpoints: readonly RelayEndpoint[], now: number): void {
      const seen = new Set<number>();
      for (const endpoint of endpoints) {
        seen.add(endpoint.id);
        const turn = turns.get(endpoint.id);
        if (turn) update(turn, endpoint);
        else turns.set(endpoint.id, toTurn(endpoint, now));
      }
      for (const [id, turn] of turns) if (!seen.has(id) && turn.inFlight === 0) turns.delete(id);
    },
    /** Every endpoint may have deliveries due: events were written. */
    markPending(): void {
      for (const turn of turns.values()) turn.pending = true;
    },
    /** Marks pending the endpoints whose retry or probe has come due by `now`. */
    due(now: number): void {
      for (const turn of turns.values()) {
        if (turn.retryAt !== null && turn.retryAt <= now) {
          turn.retryAt = null;
          turn.pending = true;
        }
        if (turn.health === 'down' && turn.probeAt !== null && turn.probeAt <= now) turn.pending = true;
      }
    },
    /** The earliest time after `now` a retry or a probe comes due; Infinity when none. */
    nextDueAt(now: number): number {
      let next = Infinity;
      for (const turn of turns.values()) {
        if (turn.retryAt !== null && turn.retryAt > now) next = Math.min(next, turn.retryAt);
        if (turn.health === 'down' && turn.probeAt !== null && turn.probeAt > now) next = Math.min(next, turn.probeAt);
      }
      return next;
    },
    list(): EndpointTurn[] {
      return [...turns.values()];
    },
    ids(): Set<number> {
      return new Set(turns.keys());
    },
    /**
     * A claim for `wants` leased `claimed`: each endpoint holds them, and is no longer pending
     * when it got fewer than it asked for (none due is left). A probe that got none was taken
     * by another relay: this one waits out that probe's lease before it tries again.
     */
    claimed(wants: readonly Allotment[], claimed: readonly ClaimedDelivery[], now: number, leaseMs: number): void {
      const taken = new Map<number, number>();
      for (const { endpointId } of claimed) taken.set(endpointId, (taken.get(endpointId) ?? 0) + 1);
      for (const want of wants) {
        const turn = turns.get(want.endpointId);
        if (!turn) continue;
        const got = taken.get(want.endpointId) ?? 0;
        turn.inFlight += got;
        turn.servedAt = now;
        turn.pending = got >= want.count;
        if (want.probe && got === 0) turn.probeAt = now + leaseMs;
      }
    },
    /** An attempt to `id` got an answer (or none): its window moves (pace.ts); a retry is noted. */
    answered(
      id: number,
      answer: { ok: boolean; timedOut: boolean; durationMs: number },
      retryAt: number | undefined,
      most: number,
    ): void {
      const turn = turns.get(id);
      if (!turn) return;
      turn.window = nextWindow(turn.window, answer, most);
      if (retryAt !== undefined) turn.retryAt = Math.min(turn.retryAt ?? Infinity, retryAt);
    },
    /** An attempt's outcome is written (or will never be): its slot is free. */
    released(id: number): void {
      const turn = turns.get(id);
      if (turn) turn.inFlight = Math.max(0, turn.inFlight - 1);
    },
    /** The back-off the store wrote with outcomes: the endpoint may have deliveries due again (a release). */
    backoff(endpoints: readonly RelayEndpoint[]): void {
      for (const endpoint of endpoints) {
        const turn = turns.get(endpoint.id);
        if (!turn) continue;
        update(turn, endpoint);
        turn.pending = true;
      }
    },
  };
}
