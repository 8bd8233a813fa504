import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import type { Store } from '../store/store.js';
import type { AttemptResult } from './deliver.js';
import { startRelay, type Log, type RelayOptions } from './relay.js';
import { startEventRetention } from './retention.js';

export interface EventsWorkOptions {
  store: Store;
  config: Config;
  clock: Clock;
  log: Log;
  /** Whether this process delivers webhooks (PETSTORE_WEBHOOK_DELIVERY, and `serve` alone). */
  deliver: boolean;
  /** Counts one webhook attempt by its result (/metrics). */
  countAttempt: (result: AttemptResult | 'event_expired') => void;
  /** How often the retention looks for expired events (retention.ts); every minute by default. */
  pruneEveryMs?: number;
  /** The relay's own options (relay.ts), for tests. */
  relay?: Partial<Pick<RelayOptions, 'pollMs' | 'batch' | 'random' | 'looked'>>;
}

export interface EventsWork {
  /** The relay looks for work now (a no-op when this process does not deliver). */
  wake(): void;
  /**
   * Stops both: the retention after its round in progress; the relay after the attempts in
   * flight, waiting up to `graceMs` for them (relay.ts, stop).
   */
  stop(graceMs: number): Promise<void>;
}

/**
 * The events' background work, started and stopped together (docs/events.md#retention,
 * docs/webhooks.md#the-relay): the retention that deletes expired events, and, where this
 * process delivers, the webhook relay.
 */
export function startEventsWork({
  store,
  config,
  clock,
  log,
  deliver,
  countAttempt,
  pruneEveryMs,
  relay: relayOptions,
}: EventsWorkOptions): EventsWork {
  const retention = startEventRetention({
    store,
    clock,
    retentionMs: config.eventRetentionMs,
    everyMs: pruneEveryMs,
    log,
  });
  const relay = deliver ? startRelay({ store, config, clock, log, countAttempt, ...relayOptions }) : undefined;
  return {
    wake: () => relay?.wake(),
    async stop(graceMs: number) {
      await Promise.all([retention.stop(), relay?.stop(graceMs)]);
    },
  };
}
