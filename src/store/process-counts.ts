/**
 * Hit totals kept in this process, for a store no other instance shares (SQLite): the Store's
 * `addHits`. Windows before the newest are forgotten as soon as a newer one begins; a late batch
 * for an older window counts in the newest one, so a count is never under the truth.
 */
export function processCounts(): (
  windowStart: number,
  subjects: string[],
  hits: number[],
) => Promise<Map<string, number>> {
  let current = -Infinity;
  let totals = new Map<string, number>();
  return async (windowStart, subjects, hits) => {
    if (windowStart > current) {
      current = windowStart;
      totals = new Map();
    }
    const after = new Map<string, number>();
    subjects.forEach((subject, i) => {
      const total = (totals.get(subject) ?? 0) + hits[i]!;
      totals.set(subject, total);
      after.set(subject, total);
    });
    return after;
  };
}
