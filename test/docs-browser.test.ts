import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { test } from 'node:test';
import { chromium } from 'playwright-core';
import { addPet, startApp } from './helpers.js';

// Debian's chromium package, never a browser download (CI installs it with apt).
const CHROMIUM = '/usr/bin/chromium';
// Skipped loudly where there is no chromium; in CI, which installs it, a missing one fails.
const skip = existsSync(CHROMIUM) || process.env.CI === 'true' ? false : 'chromium not installed: SKIPPED';
if (skip) process.stderr.write(`\n${CHROMIUM}: ${skip} (apt-get install chromium to run the /docs browser test)\n\n`);

/** A port that was free a moment ago: the document's server address must name the real one. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

test(
  '/docs in headless Chromium: offline, the three pet operations and the event feed, getPet deprecated, a try-it call with a key',
  { skip, timeout: 60_000 },
  async (t) => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const app = await startApp(t, { env: { PORT: String(port), PETSTORE_PUBLIC_URL: `${base}/v1` } });
    await app.app.listen({ port, host: '127.0.0.1' });
    const pet = await addPet(app, { name: 'Docs Dog 7', categoryId: 7 });
    const big = await app.call({
      method: 'POST',
      url: '/v1/pets',
      headers: { 'content-type': 'application/json' },
      payload: '{"name":"Big Category","categoryId":9223372036854775807}',
    });
    assert.equal(big.statusCode, 201);

    const browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox'] });
    t.after(() => browser.close());
    const context = await browser.newContext();
    const leaving: string[] = [];
    // Every request that would leave the machine is refused and remembered.
    await context.route('**/*', (route) => {
      const url = new URL(route.request().url());
      if (url.hostname === '127.0.0.1' || url.protocol === 'data:' || url.protocol === 'blob:') return route.continue();
      leaving.push(route.request().url());
      return route.abort('blockedbyclient');
    });
    const page = await context.newPage();
    const failures: string[] = [];
    page.on('pageerror', (error) => failures.push(error.message));
    // A Content-Security-Policy violation shows as a console error.
    page.on('console', (message) => {
      if (message.type() === 'error') failures.push(message.text());
    });

    const loaded = await page.goto(`${base}/docs`, { waitUntil: 'networkidle' });
    assert.equal(loaded?.status(), 200);
    for (const operation of ['listPets', 'createPet', 'getPet']) {
      await page.locator(`#operations-pets-${operation}`).waitFor({ timeout: 10_000 });
    }
    await page.locator('#operations-events-listEvents').waitFor({ timeout: 10_000 });
    assert.equal(await page.locator('.opblock').count(), 4, 'exactly the four operations are listed');
    assert.equal(await page.locator('.opblock-deprecated').count(), 1);
    assert.equal(await page.locator('#operations-pets-getPet.opblock-deprecated').count(), 1, 'getPet is deprecated');

    // Authorize with the API key, as a reader would.
    await page.locator('.auth-wrapper .authorize').click();
    await page.locator('.modal-ux input').fill(app.key);
    await page.locator('.modal-ux .auth-btn-wrapper button.authorize').click();
    await page.locator('.modal-ux .auth-btn-wrapper button.btn-done').click();

    const listPets = page.locator('#operations-pets-listPets');
    await listPets.locator('.opblock-summary').click();
    const tryItOut = listPets.locator('.try-out__btn');
    if ((await tryItOut.textContent())?.trim() === 'Try it out') await tryItOut.click();
    const [response] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/v1/pets'),
      listPets.locator('button.execute').click(),
    ]);
    assert.equal(response.status(), 200);
    assert.equal(response.request().headers().authorization, `Bearer ${app.key}`);
    const shown = listPets.locator('.live-responses-table tbody .response-col_status').first();
    await shown.waitFor();
    assert.equal((await shown.textContent())?.trim(), '200');
    const body = await listPets
      .locator('.live-responses-table .microlight, .live-responses-table pre')
      .first()
      .textContent();
    assert.match(String(body), new RegExp(`"name": "Docs Dog 7"`));
    assert.match(String(body), new RegExp(`"id": ${pet.id}`));
    // int64 past 2^53 shows digit for digit, where JSON.parse alone would show 9223372036854776000.
    assert.match(String(body), /"categoryId": 9223372036854775807\b/);
    assert.doesNotMatch(String(body), /9223372036854776000/);

    // createPet from the page: the example is a real animal, and an int64 past 2^53 goes out
    // and comes back digit for digit.
    const createPet = page.locator('#operations-pets-createPet');
    await createPet.locator('.opblock-summary').click();
    const tryCreate = createPet.locator('.try-out__btn');
    if ((await tryCreate.textContent())?.trim() === 'Try it out') await tryCreate.click();
    const editor = createPet.locator('textarea.body-param__text');
    assert.deepEqual(JSON.parse(await editor.inputValue()), { name: 'Rex', categoryId: 7, status: 'available' });
    await editor.fill('{"name":"Max","categoryId":-9223372036854775807}');
    const [created] = await Promise.all([
      page.waitForResponse((r) => new URL(r.url()).pathname === '/v1/pets' && r.request().method() === 'POST'),
      createPet.locator('button.execute').click(),
    ]);
    assert.equal(created.status(), 201);
    assert.equal(created.request().postData(), '{"name":"Max","categoryId":-9223372036854775807}');
    const createdBody = createPet.locator('.live-responses-table .microlight').first();
    await createdBody.waitFor();
    assert.match(String(await createdBody.textContent()), /"categoryId": -9223372036854775807\b/);

    // Chromium keeps big integers exact, so the note that they would be rounded is not shown.
    assert.equal(await page.locator('#int64-note').isVisible(), false);
    // The key lives in the page only: nothing in storage, and a reload forgets it.
    const stored = await page.evaluate(
      () => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }),
    );
    assert.ok(!stored.includes(app.key), `the key is not stored: ${stored}`);
    assert.ok(!stored.includes(app.key.slice(4, 20)), 'no part of the key is stored');
    assert.equal(await page.locator('.auth-wrapper .authorize.locked').count(), 1, 'authorized before a reload');
    await page.reload({ waitUntil: 'networkidle' });
    await page.locator('.auth-wrapper .authorize').waitFor();
    assert.equal(await page.locator('.auth-wrapper .authorize.locked').count(), 0, 'not authorized after a reload');

    if (process.env.PETSTORE_DOCS_SCREENSHOT)
      await page.screenshot({ path: process.env.PETSTORE_DOCS_SCREENSHOT, fullPage: false });
    assert.deepEqual(leaving, [], 'no request left the machine');
    assert.deepEqual(failures, [], 'the page raised no error');
  },
);
