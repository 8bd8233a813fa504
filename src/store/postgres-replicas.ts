import pg from 'pg';
import { connectPostgres, databaseName, ignore, type PostgresConnection } from './postgres-connection.js';
import { parseLsn, postgresReads, type PostgresReads } from './postgres-reads.js';
import {
  caughtUpTo,
  checkTiming,
  chooseReplica,
  judgeReplica,
  candidateOf,
  LEFT_OUT,
  UNCHECKED,
  type Candidate,
  type PrimaryReading,
  type PrimarySample,
  type ReadNeeds,
  type ReplicaReading,
} from './replica-policy.js';
import type { LeftOut, ReplicaState, Replication, ReplicationChange } from './store.js';

const PRIMARY_CHECK = 'SELECT pg_current_wal_lsn()::text AS lsn';
// pg_is_wal_replay_paused() raises an error outside recovery: asked only in it.
const REPLICA_CHECK =
  'SELECT pg_is_in_recovery() AS recovering, pg_last_wal_replay_lsn()::text AS replayed, ' +
  'pg_last_wal_receive_lsn()::text AS received, ' +
  'CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END AS paused';
// The same on a primary and every streaming replica of it (PostgreSQL's pg_control_system).
const CLUSTER_ID = 'SELECT system_identifier::text AS id FROM pg_control_system()';

/**
 * One connection that checks one server, opened when needed and dropped after a failure, with
 * the server's cluster id read once per connection (null: not readable by this user).
 */
function checker(url: string, timeoutMs: number) {
  let client: pg.Client | undefined;
  let cluster: string | null = null;
  const drop = () => {
    void client?.end().catch(ignore);
    client = undefined;
  };
  return {
    async check<R extends pg.QueryResultRow>(sql: string): Promise<{ row: R; cluster: string | null }> {
      try {
        if (!client) {
          client = new pg.Client({
            connectionString: url,
            application_name: 'petstore',
            connectionTimeoutMillis: timeoutMs,
            statement_timeout: timeoutMs,
            query_timeout: timeoutMs,
          });
          client.on('error', ignore);
          await client.connect();
          cluster = await client.query<{ id: string }>(CLUSTER_ID).then(
            ({ rows }) => rows[0]?.id ?? null,
            () => null,
          );
        }
        const { rows } = await client.query<R>(sql);
        return { row: rows[0]!, cluster };
      } catch (error) {
        drop();
        throw error;
      }
    },
    close: drop,
  };
}

/** One read replica: its connections and reads, and what was last measured of it. */
export interface Replica {
  readonly name: string;
  readonly reads: PostgresReads;
  readonly connection: PostgresConnection;
  reading: ReplicaReading;
  /** The WAL position it has replayed at least: its checks', and the pages read from it. */
  replayed: bigint;
  state: 'in_use' | LeftOut;
  lagMs: number | undefined;
  /** Reads this instance sent it. */
  sent: number;
}

/** The replicas of one primary, checked in the background, and the choice of one per read. */
export interface ReplicaSet {
  readonly replicas: readonly Replica[];
  /** The instance's monotonic clock, in ms, that checks and writes are timed by. */
  now(): number;
  /**
   * The replica a read with `needs` goes to at `now` (chooseReplica), -1 for the primary;
   * counted as a read of the one chosen unless `count` is false.
   */
  choose(needs: ReadNeeds, now: number, count?: boolean): number;
  /** A page read from replica `index` was read at `lsn`: it has replayed that much. */
  sawReplayed(index: number, lsn: bigint): void;
  /** A read found replica `index` unreachable: it is left out until a check answers again. */
  unreachable(index: number): void;
  /** Whether the primary answered its last check in time. */
  primaryAnswering(now: number): boolean;
  /** What /readyz, /metrics and the logs show. */
  readonly replication: Replication;
  close(): Promise<void>;
}

export interface ReplicaOptions {
  /** Most connections to each replica. */
  poolSize: number;
  /** The store's bound on a statement: a replica's reads get half, so a read it fails still has time on the primary. */
  timeoutMs: number;
  /** PETSTORE_REPLICA_MAX_LAG_MS. */
  maxLagMs: number;
  /** The monotonic clock in ms (performance.now by default). */
  now?: () => number;
}

/**
 * The streaming replicas at `readUrls` of the primary at `primaryUrl`, each checked every 100 ms
 * (checkTiming) from a connection of its own, as is the primary: the primary's WAL position,
 * each replica's replayed position, whether it is in recovery, paused, of the primary's cluster.
 * Each reading is judged (replica-policy.ts) as it arrives; a read then only compares numbers.
 * The checks' timers never keep the process alive.
 *
 * @example
 * const set = openReplicas(url, [replicaUrl], { poolSize: 10, timeoutMs: 5000, maxLagMs: 1000 });
 * const index = set.choose({ wroteAt: -Infinity, atLeast: -1n }, set.now()); // -1: the primary
 */
export function openReplicas(
  primaryUrl: string,
  readUrls: readonly string[],
  { poolSize, timeoutMs, maxLagMs, now = () => performance.now() }: ReplicaOptions,
): ReplicaSet {
  const { everyMs, rules } = checkTiming(maxLagMs);
  const replicaTimeoutMs = Math.max(50, Math.floor(timeoutMs / 2));
  const names = new Map<string, number>();
  const replicas: Replica[] = readUrls.map((url) => {
    const connection = connectPostgres(url, { poolSize, timeoutMs: replicaTimeoutMs });
    const base = databaseName(url);
    const seen = (names.get(base) ?? 0) + 1;
    names.set(base, seen);
    return {
      name: seen === 1 ? base : `${base}#${seen}`,
      connection,
      reads: postgresReads(connection, 'replica'),
      reading: { ...UNCHECKED },
      replayed: -1n,
      state: 'unmeasured',
      lagMs: undefined,
      sent: 0,
    };
  });
  const candidates: Candidate[] = replicas.map(() => LEFT_OUT);
  const primary: PrimaryReading = {
    firstAnsweredAt: undefined,
    answeredAt: undefined,
    failed: false,
    quietSince: undefined,
  };
  let primaryCluster: string | null = null;
  // Undefined until the primary's first check has ended.
  let wasAnswering: boolean | undefined;
  let primaryReads = 0;
  let turn = 0;
  // Enough samples to measure a lag up to the bound, and a little more.
  const samples: PrimarySample[] = [];
  const samplesKept = Math.ceil(maxLagMs / everyMs) + 4;
  const listeners: ((change: ReplicationChange) => void)[] = [];
  const tell = (change: ReplicationChange) => listeners.forEach((listener) => listener(change));

  const stateOf = (replica: Replica): ReplicaState => ({
    name: replica.name,
    state: replica.state,
    lagMs: replica.lagMs === undefined ? null : Math.round(replica.lagMs),
    reads: replica.sent,
  });

  function judge(index: number, at: number): void {
    const replica = replicas[index]!;
    const judged = judgeReplica(replica.reading, primary, at, rules, replica.state);
    const was = replica.state;
    replica.lagMs = judged.lagMs;
    replica.state = judged.inUse ? 'in_use' : judged.reason;
    candidates[index] = candidateOf(judged, replica.replayed);
    if (replica.state !== was) tell({ kind: 'replica', replica: stateOf(replica), was });
  }

  function judgeAll(): void {
    const at = now();
    for (let i = 0; i < replicas.length; i++) judge(i, at);
    if (primary.answeredAt === undefined && !primary.failed) return;
    const answering = primaryAnswering(at);
    // A primary found answering at the first check is no news; one found not answering is.
    if (answering !== (wasAnswering ?? true)) tell({ kind: 'primary', answering });
    wasAnswering = answering;
  }

  const primaryAnswering = (at: number) =>
    !primary.failed && primary.answeredAt !== undefined && at - primary.answeredAt <= rules.silentMs;

  const catchUp = (replica: Replica) => {
    const upTo = caughtUpTo(samples, replica.replayed);
    const reading = replica.reading;
    if (upTo !== undefined && (reading.caughtUpTo === undefined || upTo > reading.caughtUpTo))
      reading.caughtUpTo = upTo;
  };

  const primaryChecker = checker(primaryUrl, rules.silentMs);
  async function checkPrimary(): Promise<void> {
    const at = now();
    try {
      const { row, cluster } = await primaryChecker.check<{ lsn: string }>(PRIMARY_CHECK);
      const lsn = parseLsn(row.lsn);
      if (lsn === undefined) throw new Error(`the primary's WAL position is not one: ${row.lsn}`);
      samples.push({ at, lsn });
      if (samples.length > samplesKept) samples.shift();
      primaryCluster = cluster;
      primary.firstAnsweredAt ??= at;
      primary.answeredAt = at;
      primary.failed = false;
      primary.quietSince = undefined;
      for (const replica of replicas) catchUp(replica);
    } catch {
      primary.failed = true;
      primary.quietSince ??= at;
    }
  }

  const replicaCheckers = readUrls.map((url) => checker(url, rules.silentMs));
  async function checkReplica(index: number): Promise<void> {
    const replica = replicas[index]!;
    const at = now();
    try {
      const { row, cluster } = await replicaCheckers[index]!.check<{
        recovering: boolean;
        replayed: string | null;
        received: string | null;
        paused: boolean;
      }>(REPLICA_CHECK);
      const replayed = parseLsn(row.replayed);
      const received = parseLsn(row.received);
      if (replayed !== undefined && replayed > replica.replayed) replica.replayed = replayed;
      replica.reading = {
        ...replica.reading,
        answeredAt: at,
        failed: false,
        recovering: row.recovering,
        paused: row.paused,
        sameCluster: cluster === null || primaryCluster === null || cluster === primaryCluster,
        drained: received === undefined || (replayed !== undefined && replayed >= received),
      };
      catchUp(replica);
    } catch {
      replica.reading = { ...replica.reading, failed: true };
    }
  }

  // Each server in a loop of its own: a silent one delays no other's checks.
  let closed = false;
  const sleepers = new Set<() => void>();
  const pause = () =>
    new Promise<void>((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        sleepers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, everyMs);
      timer.unref();
      sleepers.add(wake);
    });
  const loop = async (check: () => Promise<void>) => {
    while (!closed) {
      await check();
      if (closed) return;
      judgeAll();
      await pause();
    }
  };
  const loops = [loop(checkPrimary), ...replicas.map((_, index) => loop(() => checkReplica(index)))];

  const replication: Replication = {
    primaryName: databaseName(primaryUrl),
    primaryAnswering: () => primaryAnswering(now()),
    primaryReads: () => primaryReads,
    replicas: () => replicas.map(stateOf),
    // A listener that comes after the first checks (the service's log, once migrated) hears what they found.
    onChange(listener) {
      listeners.push(listener);
      for (const replica of replicas) {
        if (replica.state !== 'unmeasured') listener({ kind: 'replica', replica: stateOf(replica), was: 'unmeasured' });
      }
      if (wasAnswering === false) listener({ kind: 'primary', answering: false });
    },
  };

  return {
    replicas,
    now,
    replication,
    choose(needs, at, count = true) {
      const index = chooseReplica(candidates, needs, at, turn++);
      if (!count) return index;
      if (index < 0) primaryReads++;
      else replicas[index]!.sent++;
      return index;
    },
    sawReplayed(index, lsn) {
      const replica = replicas[index]!;
      if (lsn <= replica.replayed) return;
      replica.replayed = lsn;
      if (candidates[index] !== LEFT_OUT) candidates[index]!.replayed = lsn;
    },
    unreachable(index) {
      const replica = replicas[index]!;
      replica.reading = { ...replica.reading, failed: true };
      judge(index, now());
    },
    primaryAnswering,
    async close() {
      closed = true;
      for (const wake of [...sleepers]) wake();
      await Promise.all(loops);
      primaryChecker.close();
      for (const each of replicaCheckers) each.close();
      await Promise.all(replicas.map(async ({ reads, connection }) => (await reads.settle(), connection.close())));
    },
  };
}

/** A standby the primary streams WAL to, as its pg_stat_replication shows it. */
export interface Standby {
  /** Its address, else its application_name (a standby's cluster_name by default). */
  name: string;
  state: string;
  /** How long its replay was behind, as the primary last measured; null when not shown or not known. */
  replayLagMs: number | null;
}

// Rows for every standby; the columns beyond the pid are shown only to a role with pg_read_all_stats.
const STANDBYS =
  "SELECT coalesce(host(client_addr), nullif(application_name, ''), 'local') AS name, coalesce(state, 'unknown') AS state, " +
  '(extract(epoch FROM replay_lag) * 1000)::float8 AS replay_lag_ms FROM pg_stat_replication ORDER BY 1';

/**
 * What `petstore migrate status` says of replication: the standbys the primary streams to, and
 * each configured replica as the service would judge it, measured for up to `waitMs` (until none
 * is still unmeasured).
 */
export async function measureReplication(
  primaryUrl: string,
  readUrls: readonly string[],
  { timeoutMs, maxLagMs, waitMs }: { timeoutMs: number; maxLagMs: number; waitMs: number },
): Promise<{ standbys: Standby[] | undefined; replicas: ReplicaState[]; primaryAnswering: boolean }> {
  const client = new pg.Client({
    connectionString: primaryUrl,
    application_name: 'petstore',
    connectionTimeoutMillis: timeoutMs,
    statement_timeout: timeoutMs,
    query_timeout: timeoutMs,
  });
  client.on('error', ignore);
  const standbys = client
    .connect()
    .then(() => client.query<{ name: string; state: string; replay_lag_ms: number | null }>(STANDBYS))
    .then(({ rows }) => rows.map((row) => ({ name: row.name, state: row.state, replayLagMs: row.replay_lag_ms })))
    .catch(() => undefined)
    .finally(() => client.end().catch(ignore));
  const set = openReplicas(primaryUrl, readUrls, { poolSize: 1, timeoutMs, maxLagMs });
  try {
    const until = Date.now() + waitMs;
    // Every replica judged, and the primary heard (one that does not answer is waited for).
    const measured = () =>
      set.replication.primaryAnswering() &&
      set.replication.replicas().every((replica) => replica.state !== 'unmeasured');
    while (!measured() && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 20));
    return {
      standbys: await standbys,
      replicas: set.replication.replicas(),
      primaryAnswering: set.replication.primaryAnswering(),
    };
  } finally {
    await set.close();
  }
}
