import type { Clock } from '../clock.js';
import type { Store } from '../store/store.js';

export interface RetentionOptions {
  store: Store;
  clock: Clock;
  /** Events created longer ago than this are deleted (PETSTORE_EVENT_RETENTION). */
  retentionMs: number;
  /** Pause between rounds. */
  everyMs?: number;
  /** Events deleted per statement: one short write, never a long lock. */
  batchSize?: number;
  log?: { warn(details: object, message: string): void };
}

export interface Retention {
  /** One round now: batches until none is full (at most MAX_BATCHES); resolves to how many were deleted. */
  round(): Promise<number>;
  /** No further round; resolves once the one running, if any, has ended. */
  stop(): Promise<void>;
}

const EVERY_MS = 60_000;
const BATCH_SIZE = 500;
// A round never runs for long: a larger backlog (a retention just shortened) takes more rounds.
const MAX_BATCHES = 200;

/**
 * Deletes expired events in the background (docs/events.md#retention): a round every `everyMs`,
 * each a series of bounded batches with a turn of the event loop between them, so requests are
 * served meanwhile. Its timer is unref'd (it never keeps the process alive) and set here, at
 * start, then from its own callback: no round runs in a request's async context, so none is
 * counted, logged or traced as part of one. A failed batch ends the round; the next one tries
 * again.
 */
export function startEventRetention({
  store,
  clock,
  retentionMs,
  everyMs = EVERY_MS,
  batchSize = BATCH_SIZE,
  log,
}: RetentionOptions): Retention {
  let stopped = false;
  let running: Promise<number> | undefined;
  let timer: NodeJS.Timeout | undefined;

  const prune = async () => {
    let deleted = 0;
    for (let batch = 0; batch < MAX_BATCHES && !stopped; batch++) {
      const cutoff = new Date(clock.now() - retentionMs);
      const count = await store.pruneEvents(cutoff, batchSize);
      deleted += count;
      if (count < batchSize) break;
      await new Promise((resolve) => setImmediate(resolve));
    }
    return deleted;
  };

  const round = () => {
    running ??= prune().finally(() => {
      running = undefined;
    });
    return running;
  };

  const schedule = () => {
    if (stopped) return;
    timer = setTimeout(() => {
      round()
        .catch((error: unknown) => log?.warn({ err: error }, 'deleting expired events failed; retrying next round'))
        .finally(schedule);
    }, everyMs);
    timer.unref();
  };
  schedule();

  return {
    round,
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await running?.catch(() => {});
    },
  };
}
