import pg from 'pg';

/** The channel migration 009's trigger notifies, with the schema as its payload, on each commit that writes events. */
export const EVENTS_CHANNEL = 'petstore_events';

const FIRST_PAUSE_MS = 100;
const LONGEST_PAUSE_MS = 5000;

const ignore = () => {};

/**
 * Calls `heard` on each commit, by any instance, that wrote events to this connection's schema
 * (docs/webhooks.md#the-relay): LISTEN on a connection of its own, outside the pool, made anew
 * after a pause (100 ms, doubling, at most 5 s) whenever it fails or is closed. `heard` is also
 * called each time it is listening again, since commits made meanwhile went unheard. Returns the
 * function that stops it and closes the connection.
 */
export function listenForEvents(connection: pg.ClientConfig, heard: () => void): () => Promise<void> {
  let stopped = false;
  let client: pg.Client | undefined;
  let timer: NodeJS.Timeout | undefined;
  let pause = FIRST_PAUSE_MS;

  const again = (failed: pg.Client) => {
    if (stopped || client !== failed || timer) return;
    client = undefined;
    failed.end().catch(ignore);
    timer = setTimeout(() => {
      timer = undefined;
      void connect();
    }, pause);
    timer.unref();
    pause = Math.min(pause * 2, LONGEST_PAUSE_MS);
  };

  const connect = async () => {
    const next = new pg.Client(connection);
    client = next;
    let schema: string | undefined;
    next.on('error', () => again(next));
    next.on('end', () => again(next));
    next.on('notification', ({ channel, payload }) => {
      if (channel === EVENTS_CHANNEL && schema !== undefined && (payload ?? '') === schema) heard();
    });
    try {
      await next.connect();
      const { rows } = await next.query<{ schema: string | null }>('SELECT current_schema() AS schema');
      await next.query(`LISTEN ${EVENTS_CHANNEL}`);
      schema = rows[0]?.schema ?? '';
      if (stopped) return void next.end().catch(ignore);
      pause = FIRST_PAUSE_MS;
      heard();
    } catch {
      again(next);
    }
  };
  void connect();

  return async () => {
    stopped = true;
    clearTimeout(timer);
    await client?.end().catch(ignore);
  };
}
