import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { test } from 'node:test';
import { settings } from '../src/config.js';
import { errorCodes } from '../src/schemas.js';
import { readMigrations } from '../src/store/migrations.js';

const ROOT = new URL('..', import.meta.url).pathname;
const read = (path: string) => readFileSync(join(ROOT, path), 'utf8');
const pages = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((name) => `docs/${name}`)].filter((path) =>
  path.endsWith('.md'),
);

/** Table rows of a page as trimmed cells, whatever the column alignment. */
function rowsOf(path: string): string[][] {
  return read(path)
    .split('\n')
    .filter((line) => line.startsWith('|'))
    .map((line) =>
      line
        .split('|')
        .slice(1, -1)
        .map((cell) => cell.trim()),
    );
}

/** The page's text outside fenced code blocks, where a link is not a link. */
function proseOf(text: string): string {
  return text.replace(/^```[^\n]*\n[\s\S]*?^```$/gm, '');
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens. */
function anchorOf(heading: string): string {
  return heading
    .trim()
    .toLowerCase()
    .replace(/`/g, '')
    .replace(/[^\p{L}\p{N} _-]/gu, '')
    .replace(/ /g, '-');
}

function anchorsOf(path: string): Set<string> {
  const headings = proseOf(read(path))
    .split('\n')
    .filter((line) => /^#{1,6} /.test(line))
    .map((line) => anchorOf(line.replace(/^#+ /, '')));
  return new Set(headings);
}

test('the README shows the two commands a newcomer runs, and stays a short page', () => {
  const readme = read('README.md');
  assert.ok(readme.includes('npm ci && npm start'));
  assert.ok(readme.includes('npm test'));
  assert.ok(readme.split('\n').length <= 250, `README.md has ${readme.split('\n').length} lines`);
  for (const page of pages.filter((path) => path !== 'README.md')) {
    assert.ok(readme.includes(`](${page})`), `the README links to ${page}`);
  }
});

test("the README's first start applies every migration there is, in order", () => {
  const applied = [...read('README.md').matchAll(/^Applied ([0-9]{3}_[a-z0-9_]+) \([0-9]+ ms\)\.$/gm)].map((m) => m[1]);
  assert.deepEqual(
    applied,
    readMigrations('sqlite').map((migration) => migration.name),
  );
});

test('docs/configuration.md documents every setting with its default', () => {
  const rows = rowsOf('docs/configuration.md');
  for (const setting of Object.values(settings)) {
    const row = rows.find((cells) => cells[0] === `\`${setting.env}\``);
    assert.ok(row, `${setting.env} has a row in the configuration table`);
    const shown = !setting.default ? '(none)' : `\`${setting.default}\``;
    assert.equal(row.at(-1), shown, `${setting.env} shows its default`);
  }
  const documented = rows.map((cells) => cells[0]).filter((cell) => /^`[A-Z_]+`$/.test(cell!));
  const known = new Set(Object.values(settings).map((setting) => `\`${setting.env}\``));
  for (const name of documented) assert.ok(known.has(name!), `${name} in the table is a setting of the service`);
});

test('docs/api.md lists every error code with its status, and no other', () => {
  const rows = rowsOf('docs/api.md').filter((cells) => /^`[a-z_]+`$/.test(cells[0]!) && /^[0-9]{3}$/.test(cells[1]!));
  assert.deepEqual(Object.fromEntries(rows.map((cells) => [cells[0]!.slice(1, -1), Number(cells[1])])), {
    ...errorCodes,
  });
});

test('every relative link in the README and docs/ resolves, #anchors included', () => {
  let checked = 0;
  for (const page of pages) {
    const links = [...proseOf(read(page)).matchAll(/\]\(([^)\s]+)\)/g)].map((match) => match[1]!);
    for (const link of links) {
      if (/^[a-z]+:/i.test(link)) continue;
      const [path, anchor] = link.split('#') as [string, string | undefined];
      const target = path === '' ? page : relative(ROOT, join(ROOT, dirname(page), path));
      assert.ok(existsSync(join(ROOT, target)), `${page}: ${link} names ${target}, which does not exist`);
      if (anchor !== undefined) {
        assert.ok(statSync(join(ROOT, target)).isFile() && target.endsWith('.md'), `${page}: ${link}`);
        assert.ok(anchorsOf(target).has(anchor), `${page}: ${link}: ${target} has no heading #${anchor}`);
      }
      checked++;
    }
  }
  assert.ok(checked > 30, `${checked} links checked`);
});

test('the link check itself: GitHub anchors and a missing file are told apart', () => {
  assert.equal(anchorOf('Safe retries: Idempotency-Key'), 'safe-retries-idempotency-key');
  assert.equal(anchorOf('Ids and int64'), 'ids-and-int64');
  assert.equal(anchorOf('The `petstore` command'), 'the-petstore-command');
  assert.ok(anchorsOf('docs/api.md').has('errors'));
  assert.equal(existsSync(join(ROOT, 'docs/no-such-page.md')), false);
});

test('the repository stands alone: no page sends a reader to a file outside it', () => {
  for (const page of pages) {
    assert.doesNotMatch(read(page), /shared folder|CONTRACT\.md/, page);
  }
});

/** The repository's files under `dir` whose names end in one of `endings`, recursively. */
function filesUnder(dir: string, endings: string[]): string[] {
  return readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
    .map((name) => `${dir}/${name}`)
    .filter((path) => endings.some((ending) => path.endsWith(ending)) && statSync(join(ROOT, path)).isFile());
}

// What the code and the docs may cite: their own pages, and files of the repository.
const code = [...filesUnder('src', ['.ts']), ...filesUnder('migrations', ['.sql']), ...filesUnder('test', ['.ts'])];
const prose = [...pages, 'bench/README.md', 'CHANGELOG.md'];
const PAGE_CITED = /(?<![\w/.-])docs\/([\w-]+\.md)(?:#([\w-]+))?/g;
const PATH_NAMED = /(?<![\w/.@-])((?:src|test|docs|bench|deploy|migrations|clients|\.ci)\/[\w./-]*\w)/g;

test('every docs/ page and #section the code and docs cite exists, and none cites a document outside the repository', () => {
  const outside = ['CONTRACT', 'md'].join('.');
  let cited = 0;
  for (const path of [...code, ...prose]) {
    const text = read(path);
    if (path !== 'test/readme.test.ts')
      assert.ok(!text.includes(outside), `${path} cites ${outside}, which is not in the repository`);
    for (const [, page, anchor] of text.matchAll(PAGE_CITED)) {
      if (path === 'test/readme.test.ts') continue;
      assert.ok(existsSync(join(ROOT, 'docs', page!)), `${path} cites docs/${page}, which does not exist`);
      if (anchor !== undefined)
        assert.ok(anchorsOf(`docs/${page}`).has(anchor), `${path}: docs/${page} has no heading #${anchor}`);
      cited++;
    }
  }
  assert.ok(cited > 40, `${cited} citations checked`);
});

test('every file or folder the code and docs name by its path exists', () => {
  let named = 0;
  for (const path of [...filesUnder('src', ['.ts']), ...filesUnder('migrations', ['.sql']), ...prose]) {
    for (const [, target] of read(path).matchAll(PATH_NAMED)) {
      assert.ok(existsSync(join(ROOT, target!)), `${path} names ${target}, which does not exist`);
      named++;
    }
  }
  assert.ok(named > 50, `${named} paths checked`);
});

test('every command line in the docs that starts the service gives node the flags npm start gives it', () => {
  const { scripts } = JSON.parse(read('package.json')) as { scripts: { start: string } };
  // None today: the flags, if any, sit between `exec node` and the file.
  const startFlags = /exec node ((?:\S+ )*)dist\/main\.js serve$/.exec(scripts.start)![1]!.trim();
  const lines = [...pages, 'bench/README.md'].flatMap((path) =>
    read(path)
      .split('\n')
      .filter((line) => /node(?: --[\w-]+(?:=\S+)?)* dist\/main\.js/.test(line))
      .map((line) => ({ path, flags: /node((?: --[\w-]+(?:=\S+)?)*) dist\/main\.js/.exec(line)![1]!.trim() })),
  );
  // docs/operations.md alone starts it six ways (a shell, systemd, two instances, Windows).
  assert.ok(lines.length >= 8, `${lines.length} command lines found`);
  for (const { path, flags } of lines) assert.equal(flags, startFlags, path);
});

test('docs/operations.md shows the systemd unit and the nginx example exactly as deploy/ holds them', () => {
  const page = read('docs/operations.md');
  const blocks = [...page.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map((match) => [match[1], match[2]]);
  for (const [language, file] of [
    ['ini', 'deploy/petstore.service'],
    ['nginx', 'deploy/nginx.conf'],
  ] as const) {
    const shown = blocks.filter(([lang, text]) => lang === language && text === read(file));
    assert.equal(shown.length, 1, `${file} appears once, as it is, in a ${language} block`);
    assert.ok(page.includes(`](../${file})`), `the page links to ${file}`);
  }
});

test('the docs run the command as npx petstore, which prints only what the command prints', () => {
  for (const page of pages) {
    // `npm run petstore -- …` adds npm's own lines to standard output: only with --silent.
    assert.doesNotMatch(read(page), /^\s*npm run petstore --/m, page);
  }
  assert.match(read('README.md'), /^npx petstore keys create /m);
  assert.match(read('docs/keys.md'), /^npx petstore keys create .*> \/etc\/prometheus\/petstore\.key$/m);
});

test('CHANGELOG.md keeps a changelog: [Unreleased] on top, then the version package.json names', () => {
  const { version } = JSON.parse(read('package.json')) as { version: string };
  const headings = [...read('CHANGELOG.md').matchAll(/^## \[([^\]]+)\](.*)$/gm)].map((match) => match[1]);
  assert.equal(headings[0], 'Unreleased');
  assert.equal(headings[1], version, 'the latest release is the version the service reports');
  for (const release of headings.slice(1)) assert.match(release!, /^[0-9]+\.[0-9]+\.[0-9]+$/);
  for (const kind of read('CHANGELOG.md').matchAll(/^### (.*)$/gm)) {
    assert.ok(['Added', 'Changed', 'Deprecated', 'Removed', 'Fixed', 'Security'].includes(kind[1]!), kind[1]);
  }
});
