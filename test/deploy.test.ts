import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { Agent as HttpsAgent, get as httpsGet, request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { childEnv, freePort, startServer } from './process.js';

const ROOT = new URL('..', import.meta.url).pathname.replace(/\/$/, '');
const UNIT = readFileSync(join(ROOT, 'deploy/petstore.service'), 'utf8');
const NGINX = readFileSync(join(ROOT, 'deploy/nginx.conf'), 'utf8');

/** Whether `command` runs here; the reason to skip, loudly, when it does not. */
function missing(command: string, args: string[]): string | false {
  const run = spawnSync(command, args, { encoding: 'utf8' });
  return run.error || run.status !== 0 ? `${command} is not installed here: SKIPPED` : false;
}

function tempDir(t: TestContext) {
  const dir = mkdtempSync(join(tmpdir(), 'petstore-deploy-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** The unit's settings as [key, value] pairs, per section, comments left out. */
function settingsOf(unit: string): Map<string, [string, string][]> {
  const sections = new Map<string, [string, string][]>();
  let section = '';
  for (const line of unit.split('\n')) {
    if (/^\s*(#|$)/.test(line)) continue;
    const header = /^\[(\w+)\]$/.exec(line);
    if (header) sections.set((section = header[1]!), []);
    else {
      const at = line.indexOf('=');
      sections.get(section)!.push([line.slice(0, at), line.slice(at + 1)]);
    }
  }
  return sections;
}

const valuesOf = (pairs: [string, string][] | undefined, key: string) =>
  (pairs ?? []).filter(([name]) => name === key).map(([, value]) => value);

test('the systemd unit runs the installed bin as its own user, hardened, and stops within its drain', () => {
  const unit = settingsOf(UNIT);
  const service = unit.get('Service');
  const one = (key: string) => {
    const values = valuesOf(service, key);
    assert.equal(values.length, 1, `${key} is set once`);
    return values[0]!;
  };
  assert.deepEqual(valuesOf(unit.get('Unit'), 'After'), ['network-online.target']);
  assert.deepEqual(valuesOf(unit.get('Unit'), 'Wants'), ['network-online.target']);
  assert.deepEqual(valuesOf(unit.get('Install'), 'WantedBy'), ['multi-user.target']);
  assert.equal(one('User'), 'petstore');
  assert.equal(one('StateDirectory'), 'petstore');
  assert.equal(one('ReadWritePaths'), '/var/lib/petstore');
  assert.equal(one('Environment'), 'PETSTORE_DB=/var/lib/petstore/petstore.db');
  assert.match(one('EnvironmentFile'), /^-?\/etc\/petstore\/petstore\.env$/);
  // The package's `bin` (package.json), on the Node.js the install put in node_modules.
  const { bin } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { bin: { petstore: string } };
  assert.equal(one('ExecStart'), `/opt/petstore/node_modules/.bin/node /opt/petstore/${bin.petstore} serve`);
  for (const [key, value] of [
    ['NoNewPrivileges', 'yes'],
    ['ProtectSystem', 'strict'],
    ['ProtectHome', 'yes'],
    ['PrivateTmp', 'yes'],
    ['PrivateDevices', 'yes'],
    ['RestrictAddressFamilies', 'AF_INET AF_INET6 AF_UNIX'],
    ['CapabilityBoundingSet', ''],
    ['SystemCallFilter', '@system-service'],
    ['KillSignal', 'SIGTERM'],
    ['Restart', 'on-failure'],
  ]) {
    assert.equal(one(key!), value, key);
  }
  // Restarts bounded (docs/operations.md#if-the-process-stops): a process that fails at every
  // start reaches the start limit within its interval, one that fails every 20 s never does.
  const unitOne = (key: string) => {
    const values = valuesOf(unit.get('Unit'), key);
    assert.equal(values.length, 1, `${key} is set once, in [Unit]`);
    return Number(values[0]);
  };
  const interval = unitOne('StartLimitIntervalSec');
  const burst = unitOne('StartLimitBurst');
  const restartSec = Number(one('RestartSec'));
  assert.ok(restartSec >= 1 && restartSec <= 5, `RestartSec=${restartSec}`);
  assert.ok(burst * restartSec < interval, 'quick failures reach the start limit within its interval');
  assert.ok(interval / burst >= 20, 'a failure every 20 s never reaches the start limit');
  assert.deepEqual(valuesOf(service, 'StartLimitIntervalSec'), []);
  assert.deepEqual(valuesOf(service, 'StartLimitBurst'), []);
  // server.ts drains for 10 s at most before it exits: systemd must wait longer than that.
  assert.ok(Number(one('TimeoutStopSec')) > 10, 'TimeoutStopSec above the 10 s drain');
  // V8 makes the pages it compiles into writable, then executable: Node.js aborts under it.
  assert.deepEqual(valuesOf(service, 'MemoryDenyWriteExecute'), []);
});

test(
  'systemd-analyze verify finds nothing to say about the unit',
  { skip: missing('systemd-analyze', ['--version']) },
  (t) => {
    // verify checks that ExecStart's program exists: a copy runs this checkout's built bin on the
    // node running this test, from this folder; every other line is the unit as it ships.
    const dir = tempDir(t);
    const node = realpathSync(process.execPath);
    const copy = UNIT.replace(
      'ExecStart=/opt/petstore/node_modules/.bin/node /opt/petstore/dist/main.js serve',
      `ExecStart=${node} ${ROOT}/dist/main.js serve`,
    ).replace('WorkingDirectory=/opt/petstore', `WorkingDirectory=${ROOT}`);
    assert.notEqual(copy, UNIT);
    const path = join(dir, 'petstore.service');
    writeFileSync(path, copy);
    const run = spawnSync('systemd-analyze', ['verify', path], { encoding: 'utf8', timeout: 60_000 });
    assert.equal(run.status, 0, run.stderr);
    assert.equal(run.stderr, '', 'no warning either (an unknown key is only a warning)');

    // The same check sees a misspelt setting, so its silence above means something.
    const misspelt = join(dir, 'misspelt.service');
    writeFileSync(misspelt, copy.replace('NoNewPrivileges=yes', 'NoNewPrivilege=yes'));
    const bad = spawnSync('systemd-analyze', ['verify', misspelt], { encoding: 'utf8', timeout: 60_000 });
    assert.match(bad.stderr, /Unknown key.*NoNewPrivilege/);
  },
);

test('the nginx example terminates TLS, redirects port 80, and passes the forwarded headers', () => {
  assert.match(NGINX, /^\s*listen 443 ssl http2;$/m);
  assert.match(NGINX, /^\s*listen 80;$/m);
  assert.match(NGINX, /^\s*return 301 https:\/\/\$host\$request_uri;$/m);
  for (const header of ['X-Forwarded-For', 'X-Forwarded-Proto', 'X-Forwarded-Host', 'Host']) {
    assert.match(NGINX, new RegExp(`^\\s*proxy_set_header ${header} \\$\\S+;$`, 'm'), header);
  }
  // The service trusts the proxy's X-Forwarded-For only when told to: the example says how.
  assert.match(NGINX, /PETSTORE_TRUST_PROXY=127\.0\.0\.1/);
  assert.match(NGINX, /^\s*server 127\.0\.0\.1:8080;$/m);
});

test('nginx -t accepts the example, with a self-signed certificate', { skip: missing('nginx', ['-v']) }, (t) => {
  const openssl = missing('openssl', ['version']);
  if (openssl) return t.skip(openssl);
  const dir = tempDir(t);
  const made = spawnSync(
    'openssl',
    [
      ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1'],
      ...['-keyout', join(dir, 'privkey.pem'), '-out', join(dir, 'fullchain.pem'), '-subj', '/CN=api.example.com'],
    ],
    { encoding: 'utf8' },
  );
  assert.equal(made.status, 0, made.stderr);
  const site = NGINX.replaceAll('/etc/ssl/petstore/', `${dir}/`);
  assert.notEqual(site, NGINX);
  writeFileSync(join(dir, 'petstore.conf'), site);
  // The example goes inside http { }, as a file of /etc/nginx/conf.d/ does.
  writeFileSync(
    join(dir, 'nginx.conf'),
    `pid ${dir}/nginx.pid;\nerror_log stderr;\nevents {}\nhttp {\n    include ${dir}/petstore.conf;\n}\n`,
  );
  const run = spawnSync('nginx', ['-t', '-e', 'stderr', '-p', dir, '-c', join(dir, 'nginx.conf')], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stderr, /test is successful/);
  assert.doesNotMatch(run.stderr, /\[(warn|emerg)\]/);
});

/** GET over https with the test's certificate authority, as a client of api.example.com. */
function getTls(port: number, path: string, ca: string) {
  return new Promise<{ status: number; body: string }>((resolve, reject) => {
    const request = httpsGet(
      { host: '127.0.0.1', port, path, servername: 'api.example.com', ca, headers: { host: 'api.example.com' } },
      (response) => {
        let body = '';
        response.on('data', (chunk) => (body += chunk));
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
      },
    );
    request.on('error', reject);
    request.setTimeout(30_000, () => request.destroy(new Error('no answer in 30 s')));
  });
}

test(
  'nginx with the example in front of the service answers over TLS and redirects plain HTTP',
  { skip: missing('nginx', ['-v']) || missing('openssl', ['version']), timeout: 120_000 },
  async (t) => {
    const dir = tempDir(t);
    const made = spawnSync(
      'openssl',
      [
        ...['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1'],
        ...['-keyout', join(dir, 'privkey.pem'), '-out', join(dir, 'fullchain.pem'), '-subj', '/CN=api.example.com'],
        ...['-addext', 'subjectAltName=DNS:api.example.com'],
      ],
      { encoding: 'utf8' },
    );
    assert.equal(made.status, 0, made.stderr);
    const server = await startServer(t, childEnv(t, { PETSTORE_TRUST_PROXY: '127.0.0.1' }), 60_000);
    const servicePort = new URL(server.url).port;
    const [tls, plain] = [await freePort(), await freePort()];
    // The example as it ships, on loopback ports a test may take, in front of this service.
    const site = NGINX.replaceAll('/etc/ssl/petstore/', `${dir}/`)
      .replace('listen 443 ssl http2;', `listen 127.0.0.1:${tls} ssl http2;`)
      .replace('listen [::]:443 ssl http2;', '')
      .replace('listen 80;', `listen 127.0.0.1:${plain};`)
      .replace('listen [::]:80;', '')
      .replace('server 127.0.0.1:8080;', `server 127.0.0.1:${servicePort};`);
    writeFileSync(join(dir, 'petstore.conf'), site);
    writeFileSync(
      join(dir, 'nginx.conf'),
      `daemon off;\npid ${dir}/nginx.pid;\nerror_log stderr;\nevents {}\n` +
        `http {\n    access_log off;\n    include ${dir}/petstore.conf;\n}\n`,
    );
    const nginx = spawn('nginx', ['-e', 'stderr', '-p', dir, '-c', join(dir, 'nginx.conf')]);
    let nginxErrors = '';
    nginx.stderr.on('data', (chunk) => (nginxErrors += chunk));
    t.after(() => {
      if (nginx.exitCode === null) nginx.kill('SIGQUIT');
    });
    const ca = readFileSync(join(dir, 'fullchain.pem'), 'utf8');
    let health: { status: number; body: string } | undefined;
    for (let i = 0; i < 50 && !health; i++) {
      health = await getTls(tls, '/healthz', ca).catch(() => undefined);
      if (!health) await sleep(100);
    }
    assert.ok(health, `nginx never answered: ${nginxErrors}`);
    assert.deepEqual(health, { status: 200, body: '{"status":"ok"}' });
    const document = await getTls(tls, '/v1/openapi.json', ca);
    assert.equal(document.status, 200);
    // Port 80 sends every request to the same address on 443 (fetch names the host it was given).
    const redirect = await fetch(`http://127.0.0.1:${plain}/v1/pets?limit=1`, { redirect: 'manual' });
    assert.equal(redirect.status, 301);
    assert.equal(redirect.headers.get('location'), 'https://127.0.0.1/v1/pets?limit=1');

    // 200 clients at once, each on its own connection, reading and creating: not one 502.
    const key = (await server.waitForOutput(/^ {4}(psk_\S+)$/m))[1]!;
    const agent = new HttpsAgent({ keepAlive: true, maxSockets: 200, ca, servername: 'api.example.com' });
    t.after(() => agent.destroy());
    const call = (method: string, path: string, body?: string) =>
      new Promise<number>((resolve, reject) => {
        const request = httpsRequest(
          {
            host: '127.0.0.1',
            port: tls,
            path,
            method,
            agent,
            headers: {
              host: 'api.example.com',
              authorization: `Bearer ${key}`,
              ...(body ? { 'content-type': 'application/json' } : {}),
            },
          },
          (response) => {
            response.resume();
            response.on('end', () => resolve(response.statusCode ?? 0));
          },
        );
        request.on('error', reject);
        request.setTimeout(30_000, () => request.destroy(new Error('no answer in 30 s')));
        request.end(body);
      });
    const client = async (i: number) => {
      const statuses = [];
      for (let round = 0; round < 3; round++) statuses.push(await call('GET', '/v1/pets?limit=5'));
      statuses.push(await call('POST', '/v1/pets', JSON.stringify({ name: `Rex ${i}`, categoryId: i })));
      return statuses;
    };
    const statuses = (await Promise.all([...Array(200).keys()].map(client))).flat();
    const counts: Record<number, number> = {};
    for (const status of statuses) counts[status] = (counts[status] ?? 0) + 1;
    assert.deepEqual(counts, { 200: 600, 201: 200 });
    // Nor did the service close one of nginx's connections for its limits.
    const metrics = await fetch(`${server.url}/metrics`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(metrics.status, 200);
    assert.doesNotMatch(await metrics.text(), /^petstore_connections_closed_total/m);
  },
);
