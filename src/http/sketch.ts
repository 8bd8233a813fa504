import { randomInt } from 'node:crypto';

/** Counters per row of a sketch: 4 rows of 16384 make 256 KiB, however many subjects are counted. */
export const SKETCH_WIDTH = 16384;
export const SKETCH_DEPTH = 4;

/** FNV-1a, 32 bits, over the UTF-16 code units, from `seed`. */
function fnv1a(text: string, seed: number): number {
  let hash = seed;
  for (let i = 0; i < text.length; i++) hash = Math.imul(hash ^ text.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/**
 * A count-min sketch (Cormode and Muthukrishnan) with conservative update: counts hits by
 * subject in fixed memory. A count is never under the true one; it is over it only when
 * other subjects share every one of its cells, which with W hits spread over the sketch takes
 * about W / SKETCH_WIDTH hits each. The seeds are drawn per process, so which subjects share
 * cells cannot be planned from outside.
 *
 * @example const hits = new CountMinSketch(); hits.add('192.0.2.7') // 1
 * @example hits.peek('192.0.2.7') // 1, and still 1 after
 */
export class CountMinSketch {
  readonly #cells = new Uint32Array(SKETCH_WIDTH * SKETCH_DEPTH);
  readonly #seeds = [randomInt(2 ** 32), randomInt(2 ** 32)];
  readonly #slots = new Uint32Array(SKETCH_DEPTH);

  /** Counts one hit by `subject`; returns its count so far (an estimate never under it). */
  add(subject: string): number {
    const count = Math.min(this.#find(subject) + 1, 0xffffffff);
    // Conservative update: only cells below the new count rise, so shared cells inflate less.
    for (const slot of this.#slots) if (this.#cells[slot]! < count) this.#cells[slot] = count;
    return count;
  }

  /** The count of `subject` so far (an estimate never under it), counting nothing. */
  peek(subject: string): number {
    return this.#find(subject);
  }

  /** Finds `subject`'s cell in each row (kept in #slots) and returns the least of their counts. */
  #find(subject: string): number {
    // Kirsch and Mitzenmacher: row i's cell from two hashes, h1 + i * h2.
    const h1 = fnv1a(subject, this.#seeds[0]!);
    const h2 = fnv1a(subject, this.#seeds[1]!) | 1;
    let least = 0xffffffff;
    for (let row = 0; row < SKETCH_DEPTH; row++) {
      const slot = row * SKETCH_WIDTH + (((h1 + Math.imul(row, h2)) >>> 0) % SKETCH_WIDTH);
      this.#slots[row] = slot;
      least = Math.min(least, this.#cells[slot]!);
    }
    return least;
  }

  clear(): void {
    this.#cells.fill(0);
  }
}
