/**
 * Fixed-window hit counts kept in this process: what a store shared by no other host (SQLite)
 * counts with. Windows other than the newest are forgotten as soon as a newer one begins.
 */
export function memoryCounters(): (subject: string, windowStart: number) => number {
  let current = -Infinity;
  let hits = new Map<string, number>();
  return (subject, windowStart) => {
    if (windowStart > current) {
      current = windowStart;
      hits = new Map();
    }
    // A late caller still in an older window shares the newest window's count: never under-counts.
    const count = (hits.get(subject) ?? 0) + 1;
    hits.set(subject, count);
    return count;
  };
}
