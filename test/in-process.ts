import { loadConfig } from '../src/config.js';
import { runDatabaseCommand } from '../src/cli/database.js';
import { runKeysCommand } from '../src/cli/keys.js';
import { describeDatabase } from '../src/server.js';
import { openStore } from '../src/store/open.js';

/** What a command printed, and the exit status it resolved to. */
export interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * `petstore keys <args>` run in this process, as the command runs it (runKeysCommand, with its
 * output captured and the database `env` names opened and migrated for it): the same lines and
 * exit status, without the cost of a process. What only a process shows (its exit code as the
 * shell sees it, standard output alone, two commands racing) stays with runCli (test/process.ts).
 */
export async function runKeys(args: string[], env: Record<string, string>, now?: () => Date): Promise<Ran> {
  const ran = { stdout: '', stderr: '' };
  const io = {
    out: (line: string) => void (ran.stdout += `${line}\n`),
    err: (line: string) => void (ran.stderr += `${line}\n`),
  };
  const code = await runKeysCommand(args, {
    io,
    now,
    async withStore(run) {
      const store = await openStore(loadConfig(env));
      try {
        await store.migrate();
        return await run(store);
      } finally {
        await store.close();
      }
    },
  });
  return { code, ...ran };
}

/** Makes and migrates the database `env` names, as `petstore migrate` does. */
export async function migrateDatabase(env: Record<string, string>): Promise<void> {
  const store = await openStore(loadConfig(env));
  try {
    await store.migrate();
  } finally {
    await store.close();
  }
}

/** `petstore <argv>` for the database commands (backup, restore, migrate status), run in process on the SQLite file `db`, with its output collected. */
export async function runDatabase(argv: string[], db: string): Promise<{ code: number; out: string[]; err: string[] }> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runDatabaseCommand(argv, {
    io: { out: (line) => out.push(line), err: (line) => err.push(line) },
    config: () => loadConfig({ PETSTORE_DB: db }),
    describe: describeDatabase,
  });
  return { code, out, err };
}
