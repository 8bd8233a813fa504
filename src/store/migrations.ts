import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/** The numbered steps in `migrations/<dialect>/`, in order: `001_name.sql`, `002_…`. */
export function readMigrations(dialect: 'sqlite' | 'postgres'): Migration[] {
  const dir = fileURLToPath(new URL(`../../migrations/${dialect}/`, import.meta.url));
  return readdirSync(dir)
    .filter((file) => /^[0-9]{3}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 3)),
      name: file.replace(/\.sql$/, ''),
      sql: readFileSync(dir + file, 'utf8'),
    }));
}

/** A row of `schema_migrations`: a step some release applied to the database. */
export interface AppliedMigration {
  version: number;
  name: string;
  appliedAt: Date;
}

/** One migration as `petstore migrate status` shows it. */
export interface MigrationState {
  version: number;
  name: string;
  /** unknown: applied by a newer release; this version does not have it. */
  state: 'applied' | 'pending' | 'unknown';
  appliedAt: Date | null;
}

/**
 * The database holds a migration this version does not know: a newer release touched it.
 * `serve` and `migrate` refuse it before writing anything (docs/operations.md#migrations): the newer
 * schema may mean something this version would break.
 */
export class UnknownMigrationError extends Error {
  constructor(readonly migration: string) {
    super(
      `It holds migration ${migration}, which this version of petstore does not know: a newer release ` +
        'has used it. Run that release, or restore a backup taken before it.',
    );
    this.name = 'UnknownMigrationError';
  }
}

/** The applied migrations that are not among `known` (same version and name), newest first. */
export function unknownMigrations(known: Migration[], applied: Pick<AppliedMigration, 'version' | 'name'>[]) {
  const names = new Set(known.map((migration) => `${migration.version} ${migration.name}`));
  return applied
    .filter((row) => !names.has(`${row.version} ${row.name}`))
    .sort((a, b) => b.version - a.version)
    .map((row) => row.name);
}

/** Throws UnknownMigrationError naming the newest applied migration this version does not know. */
export function refuseUnknownMigrations(known: Migration[], applied: Pick<AppliedMigration, 'version' | 'name'>[]) {
  const [newest] = unknownMigrations(known, applied);
  if (newest !== undefined) throw new UnknownMigrationError(newest);
}

/** Every known migration, applied or pending, then any applied one this version does not know. */
export function migrationStates(known: Migration[], applied: AppliedMigration[]): MigrationState[] {
  const byVersion = new Map(applied.map((row) => [row.version, row]));
  const states: MigrationState[] = known.map(({ version, name }) => {
    const row = byVersion.get(version);
    return row?.name === name
      ? { version, name, state: 'applied', appliedAt: row.appliedAt }
      : { version, name, state: 'pending', appliedAt: null };
  });
  const unknown = new Set(unknownMigrations(known, applied));
  for (const row of applied.filter((r) => unknown.has(r.name)).sort((a, b) => a.version - b.version)) {
    states.push({ version: row.version, name: row.name, state: 'unknown', appliedAt: row.appliedAt });
  }
  return states;
}
