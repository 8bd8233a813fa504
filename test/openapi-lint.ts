import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/*
 * `npm run lint:openapi`: starts the built service as `npm start` does, on a temporary SQLite
 * file, and lints the document it serves at /v1/openapi.json with Spectral (.spectral.yaml:
 * spectral:oas and the OWASP API Security ruleset) and Redocly (redocly.yaml: recommended).
 * Exits 1 when either finds an error; warnings are printed. Both run offline.
 */

const root = fileURLToPath(new URL('..', import.meta.url));
const bin = (name: string) => join(root, 'node_modules', '.bin', name);

export interface LintRun {
  linter: 'spectral' | 'redocly';
  /** The linter's exit code: 0 when it found no error. */
  code: number | null;
  output: string;
}

function run(linter: LintRun['linter'], args: string[]): Promise<LintRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [bin(linter), ...args], {
      cwd: root,
      // Redocly CLI: no usage data sent, no update check (redocly.yaml says `telemetry: off` too).
      env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_NOTIFICATIONS: 'true' },
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 60_000,
    });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ linter, code, output }));
  });
}

/**
 * Lints the OpenAPI document `text` (JSON, as served) with both linters at once.
 *
 * @example
 * const runs = await lintOpenApi(await (await fetch(`${base}/v1/openapi.json`)).text());
 * const failed = runs.filter((run) => run.code !== 0);
 */
export async function lintOpenApi(text: string): Promise<LintRun[]> {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-openapi-'));
  const file = join(dir, 'openapi.json');
  writeFileSync(file, text);
  try {
    return await Promise.all([
      run('spectral', ['lint', file, '--ruleset', join(root, '.spectral.yaml'), '--format', 'text']),
      run('redocly', ['lint', file, '--config', join(root, 'redocly.yaml'), '--format', 'stylish']),
    ]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The document a freshly started `petstore serve` (dist/main.js) serves, on a temporary SQLite file. */
async function fetchServedDocument(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-openapi-'));
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    PETSTORE_DB: join(dir, 'petstore.db'),
    PORT: '0',
    LOG_LEVEL: 'info',
  };
  // A deployment's own addresses, when given, are in the document it lints.
  for (const name of ['PETSTORE_PUBLIC_URL', 'PETSTORE_STAGING_URL']) {
    if (process.env[name] !== undefined) env[name] = process.env[name];
  }
  const child = spawn(process.execPath, [join(root, 'dist', 'main.js'), 'serve'], { env });
  try {
    const base = await new Promise<string>((resolve, reject) => {
      let output = '';
      const timer = setTimeout(() => reject(new Error(`the service did not listen in 20 s:\n${output}`)), 20_000);
      const read = (chunk: Buffer) => {
        output += chunk;
        const match = /Server listening at (http:\/\/127\.0\.0\.1:[0-9]+)/.exec(output);
        if (match) {
          clearTimeout(timer);
          resolve(match[1]!);
        }
      };
      child.stdout.on('data', read);
      child.stderr.on('data', read);
      child.on('exit', (code) => reject(new Error(`the service exited with ${code}:\n${output}`)));
    });
    const response = await fetch(`${base}/v1/openapi.json`);
    if (!response.ok) throw new Error(`GET /v1/openapi.json answered ${response.status}`);
    return await response.text();
  } finally {
    child.kill('SIGTERM');
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const runs = await lintOpenApi(await fetchServedDocument());
  for (const { linter, code, output } of runs) {
    process.stdout.write(`\n== ${linter} (exit ${code}) ==\n${output.trim()}\n`);
  }
  const failed = runs.filter((entry) => entry.code !== 0).map((entry) => entry.linter);
  process.stdout.write(
    failed.length === 0
      ? '\nThe served OpenAPI document has no lint error.\n'
      : `\nThe served OpenAPI document has lint errors: ${failed.join(', ')}.\n`,
  );
  process.exitCode = failed.length === 0 ? 0 : 1;
}
