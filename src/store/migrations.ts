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
