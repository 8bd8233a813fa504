/**
 * The connection slot policy (docs/hardening.md#connections): whether a new
 * connection may open when no slot is free, and which connection gives a slot up. Plain data in,
 * a decision out: no socket, timer or node:http here. src/http/connections.ts keeps one
 * SlotRecord per connection up to date from its socket and applies the decisions.
 */

/**
 * How long a connection must have sent nothing, or nothing more while no answer was in
 * progress, to count as silent or idle; a look at what each connection read is taken every
 * QUIET_MS / 2. A request already in the kernel's buffer is read within one turn of the event
 * loop: a connection counts only once its byte count was the same at a look taken before.
 */
export const QUIET_MS = 250;

/** Connections let in past `max` while the group holding the most gives one up. */
export const spareSlots = (max: number) => Math.max(4, Math.floor(max / 32));

/** Why the service closed a connection itself, as `petstore_connections_closed_total` counts it. */
export type CloseReason =
  /** Its answers were not read: nothing of them left for PETSTORE_STALL_TIMEOUT_MS. */
  | 'slow_reader'
  /** Its request's body stopped arriving for PETSTORE_STALL_TIMEOUT_MS (answered 408). */
  | 'no_progress'
  /** More than PIPELINE_LIMIT requests waited on it for their answers (closed after those admitted). */
  | 'pipeline_depth'
  /** With no slot free, its group held the most, and it had sent nothing for QUIET_MS. */
  | 'silent_evicted'
  /** With no slot free, its group held the most, and it was idle between two requests. */
  | 'idle_evicted'
  /** With no slot free, its group held the most: closed after the answers it had received requests for (`Connection: close`). */
  | 'busy_evicted'
  /** Refused as it opened: no slot free, its group would have held more than any other, and had nothing to give up at once. */
  | 'address_full'
  /** Refused as it opened: its group was at PETSTORE_MAX_CONNECTIONS_PER_ADDRESS with nothing silent to give up. */
  | 'address_cap'
  /** Refused as it opened: every slot, the spare ones included, was taken. */
  | 'server_full';

/** Every reason, in the order docs/hardening.md lists them. */
export const closeReasons: readonly CloseReason[] = [
  'slow_reader',
  'no_progress',
  'pipeline_depth',
  'silent_evicted',
  'idle_evicted',
  'busy_evicted',
  'address_full',
  'address_cap',
  'server_full',
];

/** What the policy knows of one open connection. Times are milliseconds of one monotonic clock. */
export interface SlotRecord {
  /** The group it counts in: its address group (addressGroup), or a key of its own (a trusted proxy's connection). */
  readonly group: string;
  readonly openedAt: number;
  /** Bytes read from the client so far. */
  read: number;
  /** Bytes read at the last look (-1 before the first), and when a look last found them changed. */
  readAtLook: number;
  changedAt: number;
  /** Bytes read when its latest request had arrived whole: more read since is a request begun. */
  readWhole: number;
  /** An answer is in progress: not all of it is in the kernel's hands yet. */
  answering: boolean;
  /** Requests received behind the answer in progress (pipelined). */
  waiting: number;
  /** Bytes of its answers still queued in the process. */
  queued: number;
  /** It holds its slot no longer for the policy: it is giving it up after its answers, or closing. */
  leaving: boolean;
}

/** What a connection could give up: at once (silent, idle), or after its answers (busy). */
export type Hold = 'fresh' | 'silent' | 'idle' | 'busy';

/**
 * What `record` is, for the choice of what to give up:
 * - silent: nothing read, at the last look either, QUIET_MS after it opened;
 * - idle: between two requests: every request it sent arrived whole and is answered, none
 *   waiting or queued, and nothing read since a look at least QUIET_MS / 2 old;
 * - fresh: nothing read yet, but opened less than QUIET_MS ago (or no look since): kept;
 * - busy: the rest (a request being received or answered, answers still queued).
 */
export function holdOf(record: SlotRecord, now: number): Hold {
  if (record.read === 0) {
    return record.readAtLook === 0 && now - record.openedAt >= QUIET_MS ? 'silent' : 'fresh';
  }
  return isQuiet(record) && record.read === record.readAtLook && now - record.changedAt >= QUIET_MS / 2
    ? 'idle'
    : 'busy';
}

/** Every request it sent arrived whole and is answered, none waiting or queued: between two requests. */
const isQuiet = (record: SlotRecord) =>
  record.read === record.readWhole && !record.answering && record.waiting === 0 && record.queued === 0;

/**
 * A connection giving up its slot between two requests that has been idle since (no request
 * came for its last answer): closed, as an idle one would be.
 */
export const isDoneLeaving = (record: SlotRecord, now: number) => record.leaving && holdOf(record, now) === 'idle';

/**
 * How soon a busy connection frees its slot, the lower the sooner: its answer in progress with
 * none waiting behind it, then with a few, then one between two requests (it closes after its
 * next answer).
 */
const busyRank = (record: SlotRecord) => (record.answering ? record.waiting : Infinity);

/**
 * The connection of `records` to give up: the first silent one (the oldest, records being in
 * the order they opened), else the first idle, else the busy one that frees its slot soonest;
 * undefined when all are fresh or leaving.
 */
export function pickToGiveUp<R extends SlotRecord>(
  records: Iterable<R>,
  now: number,
): { record: R; hold: 'silent' | 'idle' | 'busy' } | undefined {
  let idle: R | undefined;
  let busy: R | undefined;
  let rank = Infinity;
  for (const record of records) {
    if (record.leaving) continue;
    const hold = holdOf(record, now);
    if (hold === 'silent') return { record, hold };
    if (hold === 'idle') idle ??= record;
    else if (hold === 'busy' && (busy === undefined || busyRank(record) < rank)) {
      busy = record;
      rank = busyRank(record);
    }
  }
  if (idle) return { record: idle, hold: 'idle' };
  if (busy) return { record: busy, hold: 'busy' };
  return undefined;
}

export interface SlotLimits {
  /** Slots shared by all clients (PETSTORE_MAX_CONNECTIONS). */
  max: number;
  /** Connections let in past `max` while slots are given up (spareSlots). */
  spare: number;
  /** A hard cap per group (PETSTORE_MAX_CONNECTIONS_PER_ADDRESS); undefined: none. */
  perAddress?: number | undefined;
}

/** The facts an admission is decided on: plain numbers, read off the SlotTable. */
export interface AdmissionFacts extends SlotLimits {
  /** Connections open, and those of them leaving. */
  open: number;
  leaving: number;
  /** The newcomer's group: its connections open, and those holding a slot (not leaving). */
  groupOpen: number;
  groupHeld: number;
  /** The most slots held by any other group. */
  othersMost: number;
  /** Whether the newcomer's group has a silent connection, or a silent or idle one, to give up at once. */
  groupSilent: boolean;
  groupIdle: boolean;
}

export type Admission =
  /** Let in; `closeSilent`: give up the group's silent connection for it (the hard cap). */
  { admit: true; closeSilent?: boolean } | { admit: false; reason: 'server_full' | 'address_cap' | 'address_full' };

/**
 * Whether a new connection may open (docs/hardening.md#connections):
 * - past `max` + `spare` open, no (node:http itself refuses those: `server_full`);
 * - at the hard cap, only in place of its group's silent connection (`address_cap`);
 * - while a slot is free, yes, whatever its group;
 * - with none free, yes, unless its group would then hold more slots than any other and has
 *   nothing to give up at once (`address_full`): a busy connection frees its slot only after its
 *   answers, and the spare slots are for the other groups meanwhile. So a group that holds
 *   nothing is never refused here: the others hold the slots.
 */
export function decideAdmission(facts: AdmissionFacts): Admission {
  if (facts.open >= facts.max + facts.spare) return { admit: false, reason: 'server_full' };
  if (facts.perAddress !== undefined && facts.groupOpen >= facts.perAddress) {
    return facts.groupSilent ? { admit: true, closeSilent: true } : { admit: false, reason: 'address_cap' };
  }
  if (facts.open - facts.leaving < facts.max) return { admit: true };
  if (facts.groupHeld + 1 > facts.othersMost && !facts.groupSilent && !facts.groupIdle) {
    return { admit: false, reason: 'address_full' };
  }
  return { admit: true };
}

/**
 * The open connections by group, and how many slots each group holds (its connections not
 * leaving), with the groups indexed by that count: the largest are found at once, and the
 * bookkeeping of an open, a close or a give-up is constant time. Records are the caller's own
 * objects (SlotRecord and more), kept in the order they were added.
 */
export class SlotTable<R extends SlotRecord> {
  readonly limits: SlotLimits;
  /** Connections open, and those of them leaving. */
  open = 0;
  leaving = 0;
  private readonly members = new Map<string, Set<R>>();
  private readonly held = new Map<string, number>();
  /** bySize[n]: the groups holding n slots (n ≥ 1). */
  private readonly bySize: Set<string>[] = [];
  /** The most slots any group holds. */
  private top = 0;

  constructor(limits: SlotLimits) {
    this.limits = limits;
  }

  /** Slots held beyond `max`: how many are owed. */
  owed(): number {
    return this.open - this.leaving - this.limits.max;
  }

  /** The slots `group` holds. */
  heldBy(group: string): number {
    return this.held.get(group) ?? 0;
  }

  /** Every open connection, group after group. */
  *connections(): Generator<R> {
    for (const mine of this.members.values()) yield* mine;
  }

  /** The group's open connections, oldest first. */
  membersOf(group: string): ReadonlySet<R> {
    return this.members.get(group) ?? new Set();
  }

  /** The most slots held by a group other than `group`. */
  othersMost(group: string): number {
    const mine = this.heldBy(group);
    if (mine < this.top || (this.bySize[this.top]?.size ?? 0) > 1) return this.top;
    // The group holds the most alone (or nothing, like every other): the next size held.
    let size = this.top - 1;
    while (size > 0 && (this.bySize[size]?.size ?? 0) === 0) size--;
    return Math.max(size, 0);
  }

  /** The facts decideAdmission needs for a newcomer of `group`, judged at `now`. */
  admissionFacts(group: string, now: number): AdmissionFacts {
    let groupSilent = false;
    let groupIdle = false;
    for (const record of this.membersOf(group)) {
      if (record.leaving) continue;
      const hold = holdOf(record, now);
      groupSilent ||= hold === 'silent';
      groupIdle ||= hold === 'idle';
    }
    return {
      ...this.limits,
      open: this.open,
      leaving: this.leaving,
      groupOpen: this.membersOf(group).size,
      groupHeld: this.heldBy(group),
      othersMost: this.othersMost(group),
      groupSilent,
      groupIdle,
    };
  }

  add(record: R): void {
    let mine = this.members.get(record.group);
    if (mine === undefined) this.members.set(record.group, (mine = new Set()));
    mine.add(record);
    this.open++;
    if (record.leaving) this.leaving++;
    else this.resize(record.group, 1);
  }

  /** Forgets a closed connection; false when it was not in the table. */
  remove(record: R): boolean {
    const mine = this.members.get(record.group);
    if (!mine?.delete(record)) return false;
    if (mine.size === 0) this.members.delete(record.group);
    this.open--;
    if (record.leaving) this.leaving--;
    else this.resize(record.group, -1);
    return true;
  }

  /** Marks `record` as giving up its slot: its group holds one fewer. */
  markLeaving(record: R): void {
    if (record.leaving || !this.members.get(record.group)?.has(record)) return;
    record.leaving = true;
    this.leaving++;
    this.resize(record.group, -1);
  }

  /**
   * The connections to give up so that at most `max` slots are held, each from a group holding
   * the most at the time it is chosen (pickToGiveUp's order within those groups), marked
   * leaving. Fewer when the largest groups have nothing to give up yet (only fresh connections):
   * asked again later, they will.
   */
  chooseToGiveUp(now: number): { record: R; hold: 'silent' | 'idle' | 'busy' }[] {
    const chosen: { record: R; hold: 'silent' | 'idle' | 'busy' }[] = [];
    while (this.owed() > 0 && this.top > 0) {
      const choice = pickToGiveUp(this.largestMembers(), now);
      if (choice === undefined) break;
      this.markLeaving(choice.record);
      chosen.push(choice);
    }
    return chosen;
  }

  /** The records of the groups holding the most slots, group after group. */
  private *largestMembers(): Generator<R> {
    for (const group of this.bySize[this.top] ?? []) yield* this.members.get(group) ?? [];
  }

  private resize(group: string, by: 1 | -1): void {
    const before = this.held.get(group) ?? 0;
    const after = before + by;
    if (before > 0) this.bySize[before]!.delete(group);
    if (after > 0) {
      this.held.set(group, after);
      (this.bySize[after] ??= new Set()).add(group);
      if (after > this.top) this.top = after;
    } else {
      this.held.delete(group);
    }
    while (this.top > 0 && (this.bySize[this.top]?.size ?? 0) === 0) this.top--;
  }
}
