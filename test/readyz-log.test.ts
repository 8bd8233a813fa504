import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PostgresProxy } from './pg-proxy.js';
import { childEnv, startServer } from './process.js';
import { createPostgresSchema, postgresSkip } from './stores.js';

interface LogLine {
  level: number;
  msg: string;
  cause?: unknown;
  err?: unknown;
  stack?: unknown;
}

test(
  '/readyz logs a database outage once when it starts (warn, its cause once, no stack) and once when it ends (info)',
  { skip: postgresSkip, timeout: 120_000 },
  async (t) => {
    const url = new URL(await createPostgresSchema(t));
    const cut = new PostgresProxy(url.hostname, Number(url.port || 5432));
    await cut.start();
    t.after(() => cut.stop());
    url.port = String(cut.port);
    const env = childEnv(t, { DATABASE_URL: url.href });
    const server = await startServer(t, env, 60_000);
    let logs = '';
    server.child.stdout!.on('data', (chunk) => (logs += chunk));
    const ready = async () => (await fetch(`${server.url}/readyz`)).status;

    assert.equal(await ready(), 200);
    await cut.stop();
    for (let i = 0; i < 4; i++) assert.equal(await ready(), 503);
    await cut.start();
    // The pool opens a new connection on the next call; a few tries, bounded.
    let status = 503;
    for (let i = 0; i < 50 && status !== 200; i++) {
      status = await ready();
      if (status !== 200) await sleep(100);
    }
    assert.equal(status, 200);
    for (let i = 0; i < 3; i++) assert.equal(await ready(), 200);
    server.child.kill('SIGTERM');
    await server.exited;

    const lines = logs
      .split('\n')
      .filter(Boolean)
      .map((line) => JSON.parse(line) as LogLine);
    const down = lines.filter((line) => line.msg === 'database not reachable');
    const back = lines.filter((line) => line.msg === 'database reachable again');
    assert.equal(down.length, 1, logs);
    assert.equal(down[0]!.level, 40, 'warn');
    assert.equal(typeof down[0]!.cause, 'string');
    const cause = down[0]!.cause as string;
    assert.match(cause, /ECONNREFUSED|connect|terminat|closed|timeout/i, cause);
    assert.doesNotMatch(cause, /\n/);
    assert.equal(back.length, 1, logs);
    assert.equal(back[0]!.level, 30, 'info');
    // Nothing else about it: no error line, no stack anywhere, the cause written once; the
    // webhook relay, which reads the database too, says so itself at most once.
    assert.equal(lines.filter((line) => line.level >= 50).length, 0, logs);
    assert.doesNotMatch(logs, /"stack"|\\n\s+at /);
    const relay = (line: LogLine) => String(line.msg).startsWith('webhook relay');
    const others = lines.filter((line) => !relay(line)).map((line) => JSON.stringify(line));
    assert.equal(others.join('\n').split(cause).length - 1, 1, `the cause appears once: ${logs}`);
    assert.ok(
      lines.filter((line) => line.msg === 'webhook relay cannot read its work; trying again').length <= 1,
      logs,
    );
  },
);
