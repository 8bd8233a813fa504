import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { issueFirstKey } from './keys/cli.js';
import { openStore } from './store/open.js';
import type { Store } from './store/store.js';

const DRAIN_MS = 10_000;

/** One line on standard error per migration, as soon as it is applied: long ones show progress. */
export function reportMigration(name: string, ms: number): void {
  process.stderr.write(`Applied ${name} (${Math.round(ms)} ms).\n`);
}

function announceFirstKey(key: string, app: FastifyInstance) {
  const { address, port } = app.server.address() as AddressInfo;
  const url = `http://${address.includes(':') ? `[${address}]` : address}:${port}/v1/pets`;
  process.stderr.write(
    [
      '',
      'No API key existed, so this one was created. It is shown only this once: keep it.',
      '',
      `    ${key}`,
      '',
      // The key once, on its own line: a second copy is a second place to leak it from.
      `Try it:  curl -H "Authorization: Bearer <the key above>" ${url}`,
      "More keys: 'npm run petstore -- keys create --name <name>'.",
      '',
      '',
    ].join('\n'),
  );
}

/**
 * Opens the store, migrates it, issues the first key when there is none, and listens. SIGTERM
 * and SIGINT stop accepting, let in-flight requests finish, then close the database.
 */
export async function serve(config: Config): Promise<{ app: FastifyInstance; store: Store }> {
  const store = await openStore(config);
  await store.migrate(reportMigration);
  const first = await issueFirstKey(store);
  const app = await buildApp({ config, store });
  await app.listen({ host: config.host, port: config.port });
  if (first) announceFirstKey(first.key, app);

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    app.log.info({ signal }, 'draining');
    const timer = setTimeout(() => {
      app.log.error('drain timed out; exiting');
      process.exit(1);
    }, DRAIN_MS);
    timer.unref();
    await app.close();
    await store.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
  return { app, store };
}
