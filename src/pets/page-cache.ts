/** A page of animals as listPets sent it: the body, its length in bytes and its `Link` to the next page. */
export interface SentPage {
  body: string;
  bytes: number;
  link: string;
}

// About 400 pages of 20 animals: the first pages of every filter and the pages clients keep
// asking for, in a bounded share of the process's memory.
export const CACHE_BYTES = 512 * 1024;

// Slots of the table of URLs asked for once, by hash (no string kept: see FULL_ADMITS_ONE_IN).
const SEEN_SLOTS = 4096;
// Once full, one page in this many that would be kept replaces the oldest. Objects that live a
// while and are then dropped are garbage in V8's old generation, which grows (and the process
// with it) when that comes fast; requests spread over more pages than fit would churn it so.
export const FULL_ADMITS_ONE_IN = 64;

/** FNV-1a, 32 bits, over the UTF-16 code units: cheap, and a collision only keeps a page early. */
function hashUrl(url: string): number {
  let hash = 0x811c9dc5;
  for (let i = 0; i < url.length; i++) hash = Math.imul(hash ^ url.charCodeAt(i), 0x01000193);
  return hash >>> 0;
}

/**
 * listPets answers that can be sent again, by request URL. Only a page another animal follows
 * is kept, and only when the store says such a page never changes (`Store.idsVisibleInOrder`):
 * ids grow in commit order and animals are never changed or removed, so every request for that
 * URL would read the very same rows. The last page of a listing is always read afresh. A page
 * is kept when its URL is asked for a second time, so a walk through the catalogue that visits
 * each page once keeps nothing. Past CACHE_BYTES, a new page replaces the oldest ones only now
 * and then (FULL_ADMITS_ONE_IN).
 */
export class PageCache {
  #pages = new Map<string, SentPage>();
  #bytes = 0;
  #seen = new Uint32Array(SEEN_SLOTS);
  #turnedAway = 0;

  /** What the kept pages weigh, in UTF-16 code units of URL, body and link. */
  get size(): number {
    return this.#bytes;
  }

  get(url: string): SentPage | undefined {
    return this.#pages.get(url);
  }

  /** True when a page for `url` should be kept: it was asked for before. */
  wanted(url: string): boolean {
    const hash = hashUrl(url) || 1;
    const slot = hash % SEEN_SLOTS;
    if (this.#seen[slot] === hash) return true;
    this.#seen[slot] = hash;
    return false;
  }

  set(url: string, page: SentPage): void {
    if (this.#pages.has(url)) return;
    const size = sizeOf(url, page);
    if (this.#bytes + size > CACHE_BYTES && ++this.#turnedAway % FULL_ADMITS_ONE_IN !== 0) return;
    this.#pages.set(url, page);
    this.#bytes += size;
    for (const [oldest, kept] of this.#pages) {
      if (this.#bytes <= CACHE_BYTES) break;
      this.#pages.delete(oldest);
      this.#bytes -= sizeOf(oldest, kept);
    }
  }
}

const sizeOf = (url: string, { body, link }: SentPage) => url.length + body.length + link.length;
