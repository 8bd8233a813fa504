import fp from 'fastify-plugin';
import type { Clock } from '../clock.js';
import type { Config } from '../config.js';
import { refuseOtherMethods } from '../http/methods.js';
import type { Store } from '../store/store.js';
import { startEventRetention } from './retention.js';
import { listEvents } from './routes.js';

export interface EventsOptions {
  store: Store;
  clock: Clock;
  config: Config;
  /** How often the retention looks for expired events (retention.ts); every minute by default. */
  pruneEveryMs?: number;
}

/**
 * The feed under `/v1`, behind `app.authenticate('events:read')`, 405 for the methods its path
 * does not serve, and the retention that deletes expired events in the background, stopped when
 * the app closes.
 */
export const events = fp<EventsOptions>(
  async (app, { store, clock, config, pruneEveryMs }) => {
    listEvents(app, { store, authenticate: app.authenticate });
    refuseOtherMethods(app, '/v1/events', ['GET']);
    const retention = startEventRetention({
      store,
      clock,
      retentionMs: config.eventRetentionMs,
      everyMs: pruneEveryMs,
      log: app.log,
    });
    app.addHook('onClose', () => retention.stop());
  },
  { name: 'petstore-events', dependencies: ['petstore-auth'] },
);
