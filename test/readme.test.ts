import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import { settings } from '../src/config.js';
import { errorCodes } from '../src/schemas.js';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
// Table rows as trimmed cells, whatever the column alignment.
const rows = readme
  .split('\n')
  .filter((line) => line.startsWith('|'))
  .map((line) =>
    line
      .split('|')
      .slice(1, -1)
      .map((cell) => cell.trim()),
  );

test('the README shows the two commands a newcomer runs', () => {
  assert.ok(readme.includes('npm ci && npm start'));
  assert.ok(readme.includes('npm test'));
});

test('the README documents every setting with its default', () => {
  for (const setting of Object.values(settings)) {
    const row = rows.find((cells) => cells[0] === `\`${setting.env}\``);
    assert.ok(row, `${setting.env} has a row in the configuration table`);
    const shown = !setting.default ? '(none)' : `\`${setting.default}\``;
    assert.equal(row.at(-1), shown, `${setting.env} shows its default`);
  }
});

test('the README lists every error code with its status', () => {
  for (const [code, status] of Object.entries(errorCodes)) {
    assert.ok(
      rows.some((cells) => cells[0] === `\`${code}\`` && cells[1] === String(status)),
      code,
    );
  }
});
