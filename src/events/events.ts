import fp from 'fastify-plugin';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { refuseOtherMethods } from '../http/methods.js';
import type { Store } from '../store/store.js';
import { listEvents } from './routes.js';
import { startEventsWork, type EventsWorkOptions } from './work.js';

/** How long a stopping relay waits for the attempts in flight: within the shutdown's 10 s (server.ts). */
export const RELAY_GRACE_MS = 6000;

export interface EventsOptions {
  store: Store;
  clock: Clock;
  config: Config;
  /** Whether this process delivers webhooks (work.ts): `serve` with PETSTORE_WEBHOOK_DELIVERY on. */
  deliver: boolean;
  /** Counts one webhook attempt by its result (/metrics). */
  countAttempt: EventsWorkOptions['countAttempt'];
  /** How often the retention looks for expired events (retention.ts); every minute by default. */
  pruneEveryMs?: number;
  /** The relay's own options, for tests. */
  relay?: EventsWorkOptions['relay'];
  /** How long the relay waits for the attempts in flight when the app closes; RELAY_GRACE_MS by default. */
  graceMs?: number;
}

/**
 * The feed under `/v1`, behind `app.authenticate('events:read')`, 405 for the methods its path
 * does not serve, and the events' background work (work.ts: the retention, and the webhook relay
 * where this process delivers), which stops as the app closes: it starts no new attempt from
 * the moment the close begins, while the requests in flight finish.
 */
export const events = fp<EventsOptions>(
  async (app, { store, clock, config, deliver, countAttempt, pruneEveryMs, relay, graceMs = RELAY_GRACE_MS }) => {
    listEvents(app, { store, authenticate: app.authenticate });
    refuseOtherMethods(app, '/v1/events', ['GET']);
    const work = startEventsWork({ store, config, clock, log: app.log, deliver, countAttempt, pruneEveryMs, relay });
    let stopping: Promise<void> | undefined;
    const stop = () => (stopping ??= work.stop(graceMs));
    app.addHook('preClose', (done) => {
      void stop();
      done();
    });
    app.addHook('onClose', stop);
  },
  { name: 'petstore-events', dependencies: ['petstore-auth'] },
);
