import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { postgresSkip } from './stores.js';

/**
 * Why tests that run PostgreSQL's client programs (`tools`) cannot run here: no PostgreSQL, or a
 * program missing from the PATH, said loudly as SKIPPED `what`; false when they can.
 */
export function missingPgTools(tools: string[], what: string): string | false {
  if (postgresSkip) return postgresSkip;
  for (const tool of tools) {
    const { error, status } = spawnSync(tool, ['--version'], { encoding: 'utf8' });
    if (error || status !== 0) {
      const why = `${tool} is not on the PATH (install the PostgreSQL client tools)`;
      process.stderr.write(`\n${why}: SKIPPED ${what}.\n\n`);
      return why;
    }
  }
  return false;
}

/** `url` as libpq reads it: URLSearchParams writes a space as '+', libpq reads only %20 as one. */
export const forLibpq = (url: string) => url.replace(/\+/g, '%20');

/** Runs a PostgreSQL program to its end; fails the test, with what it said, unless it exits 0. */
export function runPgTool(tool: string, args: string[]): void {
  const { status, stderr } = spawnSync(tool, args, { encoding: 'utf8', timeout: 60_000 });
  assert.equal(status, 0, `${tool} ${args.join(' ')}: ${stderr}`);
}
