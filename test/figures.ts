import { appendFileSync } from 'node:fs';

/** Soak mode (`npm run soak`): longer runs, a random fuzz seed. */
export const soak = process.env.PETSTORE_SOAK === '1';

/** How much each reliability check does, in `npm test` and in soak mode: docs/reliability.md reads them too. */
export const sizes = {
  test: {
    fuzz: { sqlite: 3_000, postgres: 800, limits: 300, socket: 500, batches: 150 },
    killCycles: 3,
    leak: { inject: 20_000, socket: 1_000 },
  },
  soak: {
    fuzz: { sqlite: 20_000, postgres: 5_000, limits: 2_000, socket: 3_000, batches: 2_000 },
    killCycles: 12,
    leak: { inject: 100_000, socket: 4_000 },
  },
};

/** The sizes of this run. */
export const size = soak ? sizes.soak : sizes.test;

/**
 * Appends one measurement to the JSON-lines file named by PETSTORE_FIGURES, which
 * `npm run reliability` and `npm run soak` turn into docs/reliability.md. Without it, nothing.
 */
export function recordFigures(name: string, figures: object): void {
  const file = process.env.PETSTORE_FIGURES;
  if (!file) return;
  appendFileSync(file, JSON.stringify({ name, soak, at: new Date().toISOString(), ...figures }) + '\n');
}
