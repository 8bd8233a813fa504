import { execFileSync, spawn } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { freePort } from './processes.js';

/** Where PostgreSQL's own programs are (initdb, pg_ctl, pg_basebackup): PETSTORE_PG_BIN, else Debian's 15. */
export const PG_BIN = process.env.PETSTORE_PG_BIN || '/usr/lib/postgresql/15/bin';

/** Why a primary and a replica cannot be started here, or undefined when they can. */
export function clusterMissing(): string | undefined {
  const missing = ['initdb', 'pg_ctl', 'pg_basebackup'].filter((name) => !existsSync(join(PG_BIN, name)));
  return missing.length > 0 ? `${missing.join(', ')} not found in ${PG_BIN} (PETSTORE_PG_BIN)` : undefined;
}

// initdb refuses to run as root: as root, the servers run as the `postgres` user.
const asRoot = process.getuid?.() === 0;
const OWNER = asRoot ? 'postgres' : userInfo().username;

/** Runs one of PostgreSQL's programs to completion (as `postgres` when this process is root), within `timeoutMs`. */
function run(program: string, args: string[], timeoutMs = 60_000): Promise<string> {
  const [command, ...rest] = asRoot
    ? ['runuser', '-u', OWNER, '--', join(PG_BIN, program), ...args]
    : [join(PG_BIN, program), ...args];
  return new Promise((resolve, reject) => {
    const child = spawn(command!, rest, { timeout: timeoutMs, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code, signal) =>
      code === 0 ? resolve(output) : reject(new Error(`${program} ${args.join(' ')}: ${code ?? signal}\n${output}`)),
    );
  });
}

/** One server of the pair: its folder, port, log, and how to stop and start it. */
export interface Server {
  port: number;
  folder: string;
  log: string;
  /** `postgres://postgres@127.0.0.1:<port>/<database>`, trust authentication. */
  url: string;
  /** `pg_ctl stop`: `fast` by default (connections ended, a clean shutdown), or `immediate`. */
  stop(mode?: 'fast' | 'immediate'): Promise<void>;
  /** `pg_ctl start`, waiting until it accepts connections. */
  start(): Promise<void>;
  /** `pg_ctl reload`: rereads its configuration files. */
  reload(): Promise<void>;
  /** Appends `lines` to its postgresql.conf (the last setting of a name wins). */
  configure(lines: string[]): void;
  /** Runs `sql` as the superuser, on a connection of its own. */
  query<R extends pg.QueryResultRow = Record<string, unknown>>(sql: string, values?: unknown[]): Promise<R[]>;
}

export interface Pair {
  primary: Server;
  replica: Server;
  /** Resolves once the replica has replayed all the primary has written, within `timeoutMs`. */
  caughtUp(timeoutMs?: number): Promise<void>;
  /** Stops both servers and removes their folder. */
  remove(): Promise<void>;
}

const CONNECT_MS = 3000;

/** Runs `sql` at `url` on a connection of its own. */
async function queryAt<R extends pg.QueryResultRow>(url: string, sql: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: CONNECT_MS, query_timeout: 60_000 });
  client.on('error', () => {});
  await client.connect();
  try {
    return (await client.query<R>(sql, values)).rows;
  } finally {
    await client.end().catch(() => {});
  }
}

/**
 * A primary and a streaming replica of it, made with PostgreSQL's own tools in a new temporary
 * folder: initdb, then pg_basebackup -R (which writes the replica's primary_conninfo), each on a
 * free port of 127.0.0.1 with trust authentication, and a database `database` made before the copy.
 * Small and quick to start: tiny shared_buffers, fsync off (a test's data need not survive a
 * crash of the machine), WAL enough for a replica. `settings` are added to both servers'
 * configuration.
 *
 * @example
 * const pair = await startPair({ database: 'test' });
 * await pair.primary.query('SELECT 1');
 * await pair.remove();
 */
export async function startPair({
  database = 'test',
  settings = [],
}: { database?: string; settings?: string[] } = {}): Promise<Pair> {
  const folder = mkdtempSync(join(tmpdir(), 'petstore-pg-'));
  if (asRoot) {
    const id = (flag: string) => Number(execFileSync('id', [flag, OWNER], { encoding: 'utf8' }).trim());
    chownSync(folder, id('-u'), id('-g'));
  }
  return startIn(folder, database, settings);
}

async function startIn(folder: string, database: string, settings: string[]): Promise<Pair> {
  const [primaryPort, replicaPort] = [await freePort(), await freePort()];
  const server = (name: string, port: number): Server => {
    const data = join(folder, name);
    const log = join(folder, `${name}.log`);
    const url = `postgres://postgres@127.0.0.1:${port}/${database}`;
    return {
      port,
      folder: data,
      log,
      url,
      stop: async (mode = 'fast') => void (await run('pg_ctl', ['-D', data, '-m', mode, '-w', '-t', '30', 'stop'])),
      start: async () => void (await run('pg_ctl', ['-D', data, '-l', log, '-w', '-t', '30', 'start'])),
      reload: async () => void (await run('pg_ctl', ['-D', data, 'reload'])),
      configure: (lines) => appendFileSync(join(data, 'postgresql.conf'), lines.map((line) => `${line}\n`).join('')),
      query: (sql, values) => queryAt(url, sql, values),
    };
  };
  const primary = server('primary', primaryPort);
  const replica = server('replica', replicaPort);
  const remove = async () => {
    for (const each of [replica, primary]) {
      if (existsSync(join(each.folder, 'postmaster.pid'))) await each.stop('immediate').catch(() => {});
    }
    rmSync(folder, { recursive: true, force: true });
  };
  try {
    await run('initdb', [
      '-D',
      primary.folder,
      '-U',
      'postgres',
      '-A',
      'trust',
      '-E',
      'UTF8',
      '--locale=C',
      '--no-sync',
    ]);
    primary.configure([
      `port = ${primaryPort}`,
      "listen_addresses = '127.0.0.1'",
      `unix_socket_directories = '${folder}'`,
      'shared_buffers = 16MB',
      'fsync = off',
      'full_page_writes = off',
      'wal_level = replica',
      'max_wal_senders = 4',
      'wal_keep_size = 256MB',
      // A replica whose primary went away tries again at once, not after 5 s.
      'wal_retrieve_retry_interval = 100ms',
      ...settings,
    ]);
    await primary.start();
    // On the maintenance database: the one asked for does not exist yet.
    await queryAt(`postgres://postgres@127.0.0.1:${primaryPort}/postgres`, `CREATE DATABASE ${database}`);
    await run('pg_basebackup', [
      ...['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres'],
      ...['-D', replica.folder, '-R', '-X', 'stream', '-c', 'fast', '--no-sync'],
    ]);
    replica.configure([`port = ${replicaPort}`]);
    await replica.start();
  } catch (error) {
    await remove();
    throw error;
  }
  const pair: Pair = {
    primary,
    replica,
    async caughtUp(timeoutMs = 10_000) {
      const [{ lsn }] = (await primary.query('SELECT pg_current_wal_lsn()::text AS lsn')) as [{ lsn: string }];
      const until = Date.now() + timeoutMs;
      for (;;) {
        const [{ done }] = (await replica.query('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS done', [lsn])) as [
          { done: boolean },
        ];
        if (done) return;
        if (Date.now() > until) throw new Error(`the replica did not replay ${lsn} within ${timeoutMs} ms`);
        await sleep(20);
      }
    },
    remove,
  };
  return pair;
}
