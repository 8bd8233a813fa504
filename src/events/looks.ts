import { context, ROOT_CONTEXT } from '@opentelemetry/api';
import type { Clock } from '../clock.js';

/** How often a relay reads the endpoints anew when commits keep waking it; every poll besides. */
export const REFRESH_MS = 100;
const ECHO_MS = 10;

/** What a look found: work (look again at once), nothing, or the store failing (wait for the timer). */
export type Found = 'work' | 'nothing' | 'failed';

export interface LookSchedule {
  /** A look as soon as the one running (if any) has ended. */
  request(): void;
  /** A commit wrote events: every endpoint may have work, and the endpoints are read anew soon. */
  wake(): void;
  /** No look from now on; resolves once the one running, if any, has ended. */
  stop(): Promise<void>;
}

export interface LookScheduleOptions {
  /** One look; `read`: it reads the endpoints anew first. Never rejects. */
  look: (read: boolean) => Promise<Found>;
  /** Every endpoint may have deliveries due (a wake, a poll). */
  markPending: () => void;
  /** The earliest time after `now` a retry or a probe comes due (Unix ms, by `clock`); Infinity: none. */
  nextDueAt: (now: number) => number;
  clock: Clock;
  /** The fallback: a look, every endpoint read anew, at least this often. */
  pollMs: number;
  /**
   * Whether an event may be listed only a moment after its commit (PostgreSQL:
   * docs/events.md#ordering): a wake is then followed by looks 10, 20, 40 ms… later, up to the
   * poll, until one finds work.
   */
  echoes: boolean;
}

/**
 * When a relay looks for work (docs/webhooks.md#the-relay): one look at a time, the next at once
 * when one was asked for meanwhile or the last found work; otherwise when a retry or a probe
 * comes due, when a wake's reading of the endpoints (REFRESH_MS after the last) or echo is due,
 * and at the latest after `pollMs`. Its timer never keeps the process alive, and every look runs
 * in the root context: no request's trace or log holds it.
 */
export function scheduleLooks({
  look,
  markPending,
  nextDueAt,
  clock,
  pollMs,
  echoes,
}: LookScheduleOptions): LookSchedule {
  let stopped = false;
  let looking: Promise<void> | undefined;
  let again = false;
  let timer: NodeJS.Timeout | undefined;
  let readAt = -Infinity;
  let readOwed = false;
  let echoMs = 0;

  const run = async () => {
    const read = performance.now() - readAt >= REFRESH_MS;
    if (read) {
      readOwed = false;
      readAt = performance.now();
    }
    const found = await look(read);
    looking = undefined;
    if (found === 'work') echoMs = 0;
    if (found !== 'failed' && (found === 'work' || again)) request();
    else arm();
  };

  const request = () => {
    if (stopped) return;
    if (looking) return void (again = true);
    again = false;
    clearTimeout(timer);
    looking = new Promise<void>((resolve) => setImmediate(() => context.with(ROOT_CONTEXT, run).then(resolve)));
  };

  // The timer's look: at the first of a retry or probe due, an owed reading, an echo, the poll.
  const arm = () => {
    if (stopped) return;
    clearTimeout(timer);
    const untilDue = nextDueAt(clock.now()) - clock.now() + 1;
    const untilRead = readOwed ? REFRESH_MS - (performance.now() - readAt) : Infinity;
    const untilEcho = echoMs > 0 ? echoMs : Infinity;
    const soonest = Math.min(untilDue, untilRead, untilEcho);
    const poll = !(soonest < pollMs);
    timer = setTimeout(
      () => {
        if (poll) readAt = -Infinity;
        if (poll || echoMs > 0) markPending();
        if (echoMs > 0) echoMs = echoMs * 2 < pollMs ? echoMs * 2 : 0;
        request();
      },
      poll ? pollMs : Math.max(1, soonest),
    );
    timer.unref();
  };

  return {
    request,
    wake() {
      readOwed = true;
      if (echoes) echoMs = ECHO_MS;
      markPending();
      request();
    },
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await looking;
    },
  };
}
