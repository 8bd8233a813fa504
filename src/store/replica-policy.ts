import type { LeftOut } from './store.js';

/*
 * Where a read goes (docs/operations.md#read-replicas), as plain functions of what was last
 * measured: postgres-replicas.ts gathers the readings in the background and judges each replica
 * when a reading arrives; each read then picks among the replicas in use with chooseReplica, from
 * memory. Times are milliseconds of one monotonic clock, the instance's own: no two machines'
 * clocks are ever compared.
 */

/** A reading of the primary's WAL position: every write it acknowledged before `at` is at or before `lsn`. */
export interface PrimarySample {
  /** When the reading was asked for. */
  at: number;
  lsn: bigint;
}

/** What was last measured of the primary. */
export interface PrimaryReading {
  /** When the first check that it answered was asked for: the oldest sample; undefined: none yet. */
  firstAnsweredAt: number | undefined;
  /** When the last check that it answered was asked for; undefined: none yet. */
  answeredAt: number | undefined;
  /** Its last check failed (refused, an error, no answer in time). */
  failed: boolean;
  /** When the first check that failed since its last answer was asked for; undefined while it answers. */
  quietSince: number | undefined;
}

/** What was last measured of one replica. */
export interface ReplicaReading {
  /** When the last check that it answered was asked for; undefined: none yet. */
  answeredAt: number | undefined;
  /** Its last check failed, or a read found it unreachable since. */
  failed: boolean;
  /** In recovery (a standby); false: promoted, or never a replica. */
  recovering: boolean;
  paused: boolean;
  /** Of the primary's cluster (the same system identifier), or not known to differ. */
  sameCluster: boolean;
  /** It has replayed all the WAL it received (pg_last_wal_receive_lsn()). */
  drained: boolean;
  /**
   * The newest primary sample whose position it has replayed (caughtUpTo): it holds every write
   * the primary acknowledged before then. Undefined: none yet.
   */
  caughtUpTo: number | undefined;
}

/** A replica before its first check: assumed of the primary's cluster, in recovery, until it says otherwise. */
export const UNCHECKED: Readonly<ReplicaReading> = Object.freeze({
  answeredAt: undefined,
  failed: false,
  recovering: true,
  paused: false,
  sameCluster: true,
  drained: false,
  caughtUpTo: undefined,
});

export interface ReplicaRules {
  /** PETSTORE_REPLICA_MAX_LAG_MS. */
  maxLagMs: number;
  /** How long a server may leave checks unanswered before it counts as not answering. */
  silentMs: number;
}

// Each server is checked this often, and counts as not answering after this long without an
// answer, so a replica is left out within a second (docs/operations.md#read-replicas).
const CHECK_EVERY_MS = 100;
const SILENT_MS = 500;

/**
 * How often the servers are checked, and how long one may leave a check unanswered, for a lag
 * bound of `maxLagMs`: both shorter for a bound under 400 ms, so the checks keep up with it.
 */
export function checkTiming(maxLagMs: number): { everyMs: number; rules: ReplicaRules } {
  return {
    everyMs: Math.max(10, Math.min(CHECK_EVERY_MS, Math.floor(maxLagMs / 4))),
    rules: { maxLagMs, silentMs: Math.max(50, Math.min(SILENT_MS, Math.floor(maxLagMs / 2))) },
  };
}

export type Judgement =
  /**
   * Read from it until `until` (inclusive) unless a newer reading says otherwise; it holds every
   * write the primary acknowledged before `holds`.
   */
  | { inUse: true; lagMs: number; until: number; holds: number }
  | { inUse: false; reason: LeftOut; lagMs: number | undefined };

/**
 * The newest sample `replayed` covers: the replica holds every write acknowledged before its `at`.
 * `samples` are oldest first; a primary's position never goes back.
 *
 * @example caughtUpTo([{ at: 0, lsn: 10n }, { at: 100, lsn: 20n }], 15n) // 0
 */
export function caughtUpTo(samples: readonly PrimarySample[], replayed: bigint): number | undefined {
  for (let i = samples.length - 1; i >= 0; i--) if (samples[i]!.lsn <= replayed) return samples[i]!.at;
  return undefined;
}

const answering = (reading: { answeredAt: number | undefined; failed: boolean }, now: number, silentMs: number) =>
  !reading.failed && reading.answeredAt !== undefined && now - reading.answeredAt <= silentMs;

/**
 * How far behind the primary a replica is at `now`: how long ago the newest primary sample it
 * has replayed was taken. While the primary does not answer, its last answer stands for now: the
 * replica cannot fall behind a primary that takes no writes, and is measured by what it had
 * replayed then. One that has replayed no sample yet is at least as far behind as the first
 * sample is old: `atLeast`.
 */
export function lagOf(
  replica: ReplicaReading,
  primary: PrimaryReading,
  now: number,
  rules: ReplicaRules,
): { lagMs: number; atLeast: boolean } | undefined {
  const upTo = answering(primary, now, rules.silentMs) ? now : primary.answeredAt;
  const since = replica.caughtUpTo ?? primary.firstAnsweredAt;
  if (upTo === undefined || since === undefined) return undefined;
  return { lagMs: Math.max(0, upTo - since), atLeast: replica.caughtUpTo === undefined };
}

/**
 * Whether a replica is read from at `now`, and if not, why. `was`: the judgement before, so that
 * one left out for lagging is taken back only once its lag is within half the bound (it does not
 * flap in and out at the bound). In use, `until` is the last instant it stays in use on these
 * readings: its own silence, or its lag reaching the bound while the primary still answers.
 */
export function judgeReplica(
  replica: ReplicaReading,
  primary: PrimaryReading,
  now: number,
  rules: ReplicaRules,
  was?: 'in_use' | LeftOut,
): Judgement {
  const lag = lagOf(replica, primary, now, rules);
  // Shown when measured (a replica behind every sample is shown with how far at least, when lagging).
  const out = (reason: LeftOut): Judgement => ({
    inUse: false,
    reason,
    lagMs: lag && (!lag.atLeast || reason === 'lagging') ? lag.lagMs : undefined,
  });
  // Its first check has not ended yet (another server's check ended first): not judged yet.
  if (replica.answeredAt === undefined && !replica.failed) return out('unmeasured');
  if (!answering(replica, now, rules.silentMs)) return out('unreachable');
  if (!replica.recovering) return out('promoted');
  if (!replica.sameCluster) return out('other_cluster');
  if (replica.paused) return out('paused');
  if (lag === undefined) return out('unmeasured');
  // Not caught up with any sample yet: lagging once even the first sample is older than the bound.
  if (lag.atLeast) return out(lag.lagMs > rules.maxLagMs ? 'lagging' : 'unmeasured');
  if (lag.lagMs > (was === 'lagging' ? rules.maxLagMs / 2 : rules.maxLagMs)) return out('lagging');
  const silentFrom = replica.answeredAt! + rules.silentMs;
  // The bound is reached at caughtUpTo + maxLagMs, unless the primary counts as not answering
  // by then: its lag then stays what it was at the primary's last answer, within the bound.
  const primaryQuietFrom = answering(primary, now, rules.silentMs) ? primary.answeredAt! + rules.silentMs : -Infinity;
  const lagBound = replica.caughtUpTo! + rules.maxLagMs;
  const until = lagBound < primaryQuietFrom ? Math.min(silentFrom, lagBound) : silentFrom;
  // A primary that stopped answering streamed what it wrote before (a clean stop streams all of
  // it): a replica found since to have replayed all it received holds every write acknowledged
  // before then.
  const quiet = answering(primary, now, rules.silentMs) ? undefined : primary.quietSince;
  const drainedSince = quiet !== undefined && replica.drained && replica.answeredAt! > quiet;
  const holds = drainedSince ? Math.max(replica.caughtUpTo!, quiet) : replica.caughtUpTo!;
  return { inUse: true, lagMs: lag.lagMs, until, holds };
}

/** A replica as each read sees it: in use until `until`, holding what is needed of it. */
export interface Candidate {
  /** Last instant it is read from (-Infinity: left out). */
  until: number;
  /** Judgement's holds: it has every write acknowledged before then. */
  holds: number;
  /** The WAL position it has replayed at least. */
  replayed: bigint;
}

/** A candidate that is never chosen: a replica left out. */
export const LEFT_OUT: Candidate = Object.freeze({ until: -Infinity, holds: -Infinity, replayed: -1n });

/** The candidate a replica is, as judged, with what it has replayed. */
export const candidateOf = (judged: Judgement, replayed: bigint): Candidate =>
  judged.inUse ? { until: judged.until, holds: judged.holds, replayed } : LEFT_OUT;

/** What a read needs of the database that answers it. */
export interface ReadNeeds {
  /** When the reading key's last write through this instance was acknowledged (-Infinity: none). */
  wroteAt: number;
  /** The position the page before was read at (a cursor's), else -1n. */
  atLeast: bigint;
}

// A sample asked for after the write was acknowledged covers it: strictly after.
const serves = (candidate: Candidate, needs: ReadNeeds, now: number) =>
  now <= candidate.until && candidate.holds > needs.wroteAt && candidate.replayed >= needs.atLeast;

/**
 * The replica a read goes to, as an index of `candidates`, or -1 for the primary: one in use
 * that holds the reading key's last write and the position the page before was read at. `turn`
 * spreads reads over such replicas in turn; with none, the primary answers.
 *
 * @example chooseReplica([candidate, LEFT_OUT], { wroteAt: -Infinity, atLeast: -1n }, now, 7) // 0
 */
export function chooseReplica(candidates: readonly Candidate[], needs: ReadNeeds, now: number, turn: number): number {
  let count = 0;
  for (const candidate of candidates) if (serves(candidate, needs, now)) count++;
  if (count === 0) return -1;
  let skip = turn % count;
  for (let i = 0; i < candidates.length; i++) {
    if (serves(candidates[i]!, needs, now) && skip-- === 0) return i;
  }
  return -1;
}
