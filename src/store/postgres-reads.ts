import { groupCalls } from './batches.js';
import { HORIZON } from './postgres-event-clock.js';
import type { PostgresConnection, Statement } from './postgres-connection.js';
import { INT64_MAX } from '../schemas.js';
import {
  ACTIVE_KEY_COLUMNS,
  toActiveKey,
  toEvent,
  toPet,
  type ActiveKeyRow,
  type EventRow,
  type PetRow,
} from './rows.js';
import type { ActiveKey, EventQuery, EventRecord, ListQuery, PetPage, PetRecord } from './store.js';

const PET_COLUMNS = 'id, name, category_id, status';

/**
 * Which WAL position a page is read at, on a store with read replicas: on the primary, what it
 * has written (a page read there holds no commit past it); on a replica, what it has replayed.
 */
export type PagePosition = 'primary' | 'replica';

const POSITION_SQL: Record<PagePosition, string> = {
  primary: 'pg_current_wal_lsn()',
  replica: 'pg_last_wal_replay_lsn()',
};

/**
 * The page statements, with the WAL position as a column `lsn` when `position` is given: read
 * once per statement, as a one-row FROM item, and repeated on its rows.
 */
function pageStatements(position: PagePosition | undefined) {
  const suffix = position ? 'At' : '';
  const at = position ? `, w.lsn FROM (SELECT ${POSITION_SQL[position]}::text AS lsn) AS w,` : ' FROM';
  return {
    // n: which page of the batch a row belongs to. Each page is its own index range scan.
    listAllPages: {
      name: `listAllPages${suffix}`,
      text:
        `SELECT q.n, p.*${at} unnest($1::bigint[], $2::int[]) WITH ORDINALITY AS q (after_id, size, n), ` +
        `LATERAL (SELECT ${PET_COLUMNS} FROM pets WHERE id > q.after_id ORDER BY id LIMIT q.size) AS p ORDER BY q.n, p.id`,
      retried: true,
    },
    listPagesByStatus: {
      name: `listPagesByStatus${suffix}`,
      text:
        `SELECT q.n, p.*${at} unnest($1::text[], $2::bigint[], $3::int[]) WITH ORDINALITY AS q (wanted, after_id, size, n), ` +
        `LATERAL (SELECT ${PET_COLUMNS} FROM pets WHERE status = q.wanted AND id > q.after_id ORDER BY id LIMIT q.size) AS p ` +
        'ORDER BY q.n, p.id',
      retried: true,
    },
  } satisfies Record<string, Statement>;
}

const statements = {
  // The reads of one turn of the event loop, one statement per kind: one round trip for all.
  getPets: { name: 'getPets', text: `SELECT ${PET_COLUMNS} FROM pets WHERE id = ANY($1::bigint[])`, retried: true },
  // Only events whose transaction is older than every one still running (the statement's own
  // snapshot's xmin): any event not yet visible then sorts after the last one listed. A
  // transaction left open anywhere in the cluster holds the feed back, never reorders it. A hot
  // standby's snapshot has the same xmin rule, from the transactions its replay knows are running
  // (docs/events.md#ordering).
  listEvents: {
    name: 'listEvents',
    text:
      'SELECT tx, seq, type, created_at, data FROM events ' +
      `WHERE (tx, seq) > ($1::bigint, $2::bigint) AND tx < ${HORIZON} ORDER BY tx, seq LIMIT $3`,
    retried: true,
  },
  findKey: {
    name: 'findKey',
    text: `SELECT ${ACTIVE_KEY_COLUMNS} FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`,
    retried: true,
  },
} satisfies Record<string, Statement>;

/**
 * A WAL position (`0/3430FB0`, as PostgreSQL writes a pg_lsn) as a number, or undefined for null.
 *
 * @example parseLsn('1/0') // 4294967296n
 */
export function parseLsn(text: string | null | undefined): bigint | undefined {
  const match = text ? /^([0-9A-F]{1,8})\/([0-9A-F]{1,8})$/i.exec(text) : null;
  return match ? (BigInt(`0x${match[1]}`) << 32n) | BigInt(`0x${match[2]}`) : undefined;
}

/**
 * `page` with its position: not enumerable, so the page is still a plain array of animals to
 * everything that reads, compares or serializes it.
 */
const readAtOn = (page: PetPage, readAt: bigint | undefined): PetPage =>
  readAt === undefined ? page : Object.defineProperty(page, 'readAt', { value: readAt });

/** What makes two page queries one page: status, cursor (none is 0) and limit. */
export const pageKey = (q: ListQuery) => `${q.status ?? ''} ${q.afterId ?? 0n} ${q.limit}`;

/** The reads one PostgreSQL server answers: the primary's, or a replica's. */
export interface PostgresReads {
  getPet(id: bigint): Promise<PetRecord | undefined>;
  listPets(query: ListQuery): Promise<PetPage>;
  listEvents(query: EventQuery): Promise<EventRecord[]>;
  findActiveKey(hash: Buffer): Promise<ActiveKey | undefined>;
  /** Resolves once the reads in flight have settled. */
  settle(): Promise<unknown>;
}

/**
 * The reads of the animals, the feed and the keys on `connection`, those of one turn of the event
 * loop grouped into one statement per kind. `position`: each page carries the WAL position it was
 * read at (PetPage's readAt), on a store with read replicas.
 */
export function postgresReads(connection: PostgresConnection, position?: PagePosition): PostgresReads {
  const { query } = connection;
  const pages = pageStatements(position);

  // The reads of one turn, grouped the same way (a read alone is a group of one): fewer round
  // trips, and less work per read for both the driver and the database.
  const getPets = groupCalls(async (ids: bigint[]): Promise<PromiseSettledResult<PetRecord | undefined>[]> => {
    const { rows } = await query<PetRow>(statements.getPets, [ids]);
    const found = new Map(rows.map((row) => [row.id, toPet(row)]));
    return ids.map((id) => ({ status: 'fulfilled', value: found.get(id) }));
  });
  // The pages of one turn, one statement per kind; each row goes back to its page by n, the
  // page's place in the group. A page that several requests of the turn ask for (the first
  // page, by every client at once) is read once: groupCalls keys the queries, and listPets gives
  // each caller a copy, since the route cuts the page it gets to the limit.
  const groupPages = (statement: Statement, values: (queries: ListQuery[]) => unknown[]) =>
    groupCalls(async (queries: ListQuery[]) => {
      const { rows } = await query<PetRow & { n: bigint; lsn?: string | null }>(statement, values(queries));
      const readAt = parseLsn(rows[0]?.lsn);
      const found = queries.map((): PetPage => []);
      for (const row of rows) found[Number(row.n) - 1]!.push(toPet(row));
      for (const page of found) readAtOn(page, readAt);
      return found.map((value) => ({ status: 'fulfilled', value }) as const);
    }, pageKey);
  const listAllPages = groupPages(pages.listAllPages, (queries) => [
    queries.map((q) => q.afterId ?? 0n),
    queries.map((q) => q.limit),
  ]);
  const listPagesByStatus = groupPages(pages.listPagesByStatus, (queries) => [
    queries.map((q) => q.status),
    queries.map((q) => q.afterId ?? 0n),
    queries.map((q) => q.limit),
  ]);

  return {
    getPet: (id) => getPets.call(id),

    async listPets(list) {
      const page = await (list.status ? listPagesByStatus : listAllPages).call(list);
      return readAtOn(page.slice(), page.readAt);
    },

    async listEvents({ after, limit }) {
      // A position past int64 (never issued) sorts after every event.
      if (after && after.tx > INT64_MAX) return [];
      const { rows } = await query<EventRow>(statements.listEvents, [after?.tx ?? 0n, after?.seq ?? 0n, limit]);
      return rows.map(toEvent);
    },

    async findActiveKey(hash) {
      const { rows } = await query<ActiveKeyRow>(statements.findKey, [hash]);
      return rows[0] && toActiveKey(rows[0]);
    },

    settle: () => Promise.all([getPets.settle(), listAllPages.settle(), listPagesByStatus.settle()]),
  };
}
