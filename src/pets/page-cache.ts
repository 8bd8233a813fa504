import type { IncomingMessage, ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { holdAdmission, type Admission, type Gate } from '../http/auth.js';
import { countAnswer, type Metrics } from '../http/metrics.js';
import { logAnswer, readRequestId } from '../http/request-log.js';

/** A page of animals as listPets sent it: the body's bytes and its `Link` to the next page. */
export interface SentPage {
  body: Buffer;
  link: string;
}

// About 1,500 pages of 20 animals: the first pages of every filter and the pages clients are
// walking through, well inside the 100 MB the service runs in.
const CACHE_BYTES = 2 * 1024 * 1024;

/**
 * listPets answers that can be sent again, by request URL. Only a page another animal follows
 * is kept, and only when the store says such a page never changes (`StoreMemory.finalPages`):
 * ids grow in commit order and animals are never changed or removed, so every request for that
 * URL would read the very same rows. The last page of a listing is always read afresh. Oldest
 * pages are dropped first past CACHE_BYTES.
 */
export class PageCache {
  #pages = new Map<string, SentPage>();
  #bytes = 0;

  get(url: string): SentPage | undefined {
    return this.#pages.get(url);
  }

  set(url: string, page: SentPage): void {
    if (this.#pages.has(url)) return;
    this.#pages.set(url, page);
    this.#bytes += url.length + page.body.length + page.link.length;
    for (const [oldest, { body, link }] of this.#pages) {
      if (this.#bytes <= CACHE_BYTES) break;
      this.#pages.delete(oldest);
      this.#bytes -= oldest.length + body.length + link.length;
    }
  }
}

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
 * malformed key, a refused address; Fastify then answers. A key over its rate limit was
 * counted here, so Fastify gets that decision with the request instead of counting again.
 */
export function answerCachedPages({ pages, gate, metrics, log, closing }: CachedPagesDeps) {
  return function answerCachedPage(request: IncomingMessage, response: ServerResponse): boolean {
    if (request.method !== 'GET') return false;
    const started = performance.now();
    const url = request.url!;
    const page = pages.get(url);
    if (page === undefined || request.headers.host === undefined || gate.blocksAddresses || closing()) return false;
    const apiKeyId = gate.rememberedKey(request.headers.authorization);
    if (apiKeyId === undefined) return false;
    let admission: Admission;
    try {
      const admitted = gate.admitKey(apiKeyId);
      if (admitted instanceof Promise) {
        holdAdmission(request, () => admitted);
        return false;
      }
      admission = admitted;
    } catch (refusal) {
      holdAdmission(request, () => {
        throw refusal;
      });
      return false;
    }
    const requestId = readRequestId(request);
    const { rateFields } = admission;
    // The fields in the order the route sets them (guardRequest, authenticate, the route, onSend).
    const headers = ['x-content-type-options', 'nosniff', 'cache-control', 'no-store'];
    if (rateFields) headers.push('ratelimit-policy', rateFields['ratelimit-policy'], 'ratelimit', rateFields.ratelimit);
    headers.push(
      'link',
      page.link,
      'content-type',
      'application/json; charset=utf-8',
      'x-request-id',
      requestId,
      'content-length',
      String(page.body.length),
    );
    response.writeHead(200, headers);
    response.end(page.body);
    const seconds = (performance.now() - started) / 1000;
    countAnswer(metrics, OPERATION, 'GET', 200, seconds);
    logAnswer(log, requestId, { operation: OPERATION, method: 'GET', url, status: 200, seconds });
    return true;
  };
}
