import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { holdRefusal, type Admission, type Gate } from '../http/auth.js';
import type { Metrics } from '../http/metrics.js';
import { recordAnswer } from '../http/answers.js';
import { NO_STORE, NOSNIFF } from '../http/limits.js';
import { readRequestId } from '../http/request-log.js';

/** A page of animals as listPets sent it: the body, its length in bytes and its `Link` to the next page. */
export interface SentPage {
  body: string;
  bytes: number;
  link: string;
}

// About 400 pages of 20 animals: the first pages of every filter and the pages clients keep
// asking for, well inside the 100 MB the service runs in.
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
 * is kept, and only when the store says such a page never changes (`StoreMemory.finalPages`):
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

export interface CachedPagesDeps {
  pages: PageCache;
  gate: Gate;
  metrics: Metrics;
  log: FastifyBaseLogger;
  /** True once the service is draining: then Fastify answers, with `Connection: close`. */
  closing: () => boolean;
}

const OPERATION = 'listPets';

/**
 * A server `request` listener in front of Fastify that answers `GET /v1/pets…` from the page
 * cache, with everything else listPets' route would do: the key checked and counted, the
 * security, RateLimit, Link, Content-Type and X-Request-Id fields, the metrics and the log
 * line. A URL is in the cache only after the route answered it 200 (so the request is valid),
 * and the answer depends on nothing else but the key. It returns false, having changed nothing,
 * whenever the route may answer differently: no cached page, no Host, an unremembered or
 * malformed key; Fastify then answers. A key over its rate limit was counted here, so Fastify
 * gets that decision with the request instead of counting again.
 */
export function answerCachedPages({ pages, gate, metrics, log, closing }: CachedPagesDeps) {
  return function answerCachedPage(request: IncomingMessage, response: ServerResponse): boolean {
    if (request.method !== 'GET') return false;
    const url = request.url!;
    const page = pages.get(url);
    if (page === undefined || request.headers.host === undefined || closing()) return false;
    const started = performance.now();
    const apiKeyId = gate.rememberedKey(request.headers.authorization, request.socket, 'pets:read');
    if (apiKeyId === undefined) return false;
    let admission: Admission;
    try {
      admission = gate.admitKey(apiKeyId);
    } catch (refusal) {
      holdRefusal(request, refusal);
      return false;
    }
    const requestId = readRequestId(request);
    const { rateFields } = admission;
    // The fields in the order the route sets them (observeAnswers, authenticate, the route).
    const headers: string[] = ['x-request-id', requestId, NOSNIFF[0], NOSNIFF[1], NO_STORE[0], NO_STORE[1]];
    if (rateFields) headers.push('ratelimit-policy', rateFields['ratelimit-policy'], 'ratelimit', rateFields.ratelimit);
    headers.push(
      'link',
      page.link,
      'content-type',
      'application/json; charset=utf-8',
      'content-length',
      String(page.bytes),
    );
    response.writeHead(200, headers);
    response.end(page.body);
    const seconds = (performance.now() - started) / 1000;
    recordAnswer(metrics, log, requestId, { operation: OPERATION, method: 'GET', url, status: 200, seconds });
    return true;
  };
}
