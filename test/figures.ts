import { appendFileSync } from 'node:fs';

/** Soak mode (`npm run soak`): longer runs, a random fuzz seed. */
export const soak = process.env.PETSTORE_SOAK === '1';

/**
 * Appends one measurement to the JSON-lines file named by PETSTORE_FIGURES, which
 * `npm run reliability` and `npm run soak` turn into docs/reliability.md. Without it, nothing.
 */
export function recordFigures(name: string, figures: object): void {
  const file = process.env.PETSTORE_FIGURES;
  if (!file) return;
  appendFileSync(file, JSON.stringify({ name, soak, at: new Date().toISOString(), ...figures }) + '\n');
}
