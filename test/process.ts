import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type AddressInfo } from 'node:net';
import type { TestContext } from 'node:test';

// The built command, as it is deployed: `npm test` builds it first (the `pretest` script).
export const MAIN = new URL('../dist/main.js', import.meta.url).pathname;

/** Environment for a child `petstore`: its own SQLite file, any port, info logs (startServer reads them). */
export function childEnv(t: TestContext, extra: Record<string, string> = {}): Record<string, string> {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-proc-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return {
    PATH: process.env.PATH ?? '',
    PETSTORE_DB: join(dir, 'petstore.db'),
    PORT: '0',
    LOG_LEVEL: 'info',
    ...extra,
  };
}

/** Runs `petstore <args>` to completion. */
export function runCli(args: string[], env: Record<string, string>, timeoutMs = 20_000) {
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    const child = spawn(process.execPath, [MAIN, ...args], { env, timeout: timeoutMs });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

/**
 * Runs a probe script (a `.ts` file that prints one JSON object) with a collectable heap, and
 * resolves to what it printed; rejects with its standard error when it fails.
 */
export function runProbe<T>(probe: URL, env: Record<string, string>): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--expose-gc', '--import', 'tsx', probe.pathname], { env });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => (stdout += chunk));
    child.stderr.on('data', (chunk) => (stderr += chunk));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(JSON.parse(stdout) as T) : reject(new Error(`${probe.pathname} exited ${code}: ${stderr}`)),
    );
  });
}

export interface Server {
  child: ChildProcess;
  url: string;
  stderr: () => string;
  /** Resolves with the first match of `pattern` in its output (both streams), waiting up to `timeoutMs`. */
  waitForOutput: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpExecArray>;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `petstore serve` and resolves once it listens; killed after the test if still running. */
export function startServer(t: TestContext, env: Record<string, string>, timeoutMs = 20_000): Promise<Server> {
  const child = spawn(process.execPath, [MAIN, 'serve'], { env });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  let stdout = '';
  child.stderr!.on('data', (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('exit', (code, signal) => resolve({ code, signal })),
  );
  const waitForOutput = (pattern: RegExp, waitMs = 5_000) =>
    new Promise<RegExpExecArray>((resolve, reject) => {
      const streams = [child.stdout!, child.stderr!];
      const stop = () => {
        clearTimeout(timer);
        for (const stream of streams) stream.off('data', check);
      };
      // Runs after the collectors above, so the text includes the chunk that triggered it.
      function check() {
        const match = pattern.exec(stdout + stderr);
        if (match) {
          stop();
          resolve(match);
        }
      }
      const timer = setTimeout(() => {
        stop();
        reject(new Error(`output never matched ${pattern}:\n${stdout}\n${stderr}`));
      }, waitMs);
      for (const stream of streams) stream.on('data', check);
      check();
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve did not listen in time:\n${stdout}\n${stderr}`)), timeoutMs);
    child.stdout!.on('data', (chunk) => {
      stdout += chunk;
      const match = /Server listening at (http:\/\/127\.0\.0\.1:[0-9]+)/.exec(stdout);
      if (match) {
        clearTimeout(timer);
        resolve({ child, url: match[1]!, stderr: () => stderr, waitForOutput, exited });
      }
    });
    void exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code} before listening:\n${stdout}\n${stderr}`));
    });
  });
}

/** A TCP port on 127.0.0.1 nothing listens on at the moment. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}
