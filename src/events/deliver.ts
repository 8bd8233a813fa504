import http from 'node:http';
import https from 'node:https';
import { context, propagation, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace } from '@opentelemetry/api';
import { version } from '../version.js';

/** How much of a receiver's answer body is read; the rest is dropped with the connection. */
export const ANSWER_BODY_LIMIT = 64 * 1024;

/** How an attempt ended, as /metrics counts it. */
export type AttemptResult = 'success' | 'http_error' | 'redirect' | 'timeout' | 'network_error' | 'url_refused';

export interface Attempt {
  result: AttemptResult;
  ok: boolean;
  /** The receiver's status; null when none came. */
  status: number | null;
  /** What went wrong, in words; null on success. */
  error: string | null;
  durationMs: number;
  /** True when the relay stopped it (shutdown): not an attempt to record. */
  aborted: boolean;
}

export interface PostOptions {
  url: string;
  body: string;
  /** The Standard Webhooks headers. */
  headers: Record<string, string>;
  timeoutMs: number;
  /** Keep-alive agents, one per scheme, shared by the relay's attempts. */
  agents: { http: http.Agent; https: https.Agent };
  signal: AbortSignal;
  /** Attributes of the client span (no URL path or query: they may hold a token). */
  spanAttributes?: Record<string, string | number>;
}

const tracer = trace.getTracer('petstore.webhooks');

function networkError(error: Error): string {
  const code = (error as { code?: unknown }).code;
  return typeof code === 'string' ? `${code}: ${error.message}` : error.message;
}

/**
 * One POST of an event to a receiver, with node:http(s) directly: redirects are never followed
 * (a 3xx is a failure), the whole attempt is bounded by `timeoutMs`, and at most
 * ANSWER_BODY_LIMIT bytes of the answer are read (docs/webhooks.md#delivery). A client span
 * whose context goes out as `traceparent` when tracing is on; the span starts from the root
 * context, never a request's. Never rejects.
 */
export function postEvent({
  url,
  body,
  headers,
  timeoutMs,
  agents,
  signal,
  spanAttributes,
}: PostOptions): Promise<Attempt> {
  const target = new URL(url);
  const span = tracer.startSpan(
    'POST webhook',
    {
      kind: SpanKind.CLIENT,
      attributes: {
        'http.request.method': 'POST',
        'server.address': target.hostname,
        'server.port': Number(target.port || (target.protocol === 'https:' ? 443 : 80)),
        ...spanAttributes,
      },
    },
    ROOT_CONTEXT,
  );
  const sent: Record<string, string | number> = {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    'user-agent': `petstore/${version}`,
  };
  propagation.inject(trace.setSpan(ROOT_CONTEXT, span), sent);
  const started = performance.now();

  return context.with(
    ROOT_CONTEXT,
    () =>
      new Promise<Attempt>((resolve) => {
        let settled = false;
        let status: number | null = null;
        const finish = (result: AttemptResult, error: string | null, aborted = false) => {
          if (settled) return;
          settled = true;
          clearTimeout(timer);
          signal.removeEventListener('abort', onAbort);
          if (status !== null) span.setAttribute('http.response.status_code', status);
          if (result !== 'success') span.setStatus({ code: SpanStatusCode.ERROR, message: result });
          span.end();
          const durationMs = Math.round(performance.now() - started);
          resolve({ result, ok: result === 'success', status, error, durationMs, aborted });
        };
        const secure = target.protocol === 'https:';
        const request = (secure ? https : http).request(target, {
          method: 'POST',
          headers: sent,
          agent: secure ? agents.https : agents.http,
        });
        const timer = setTimeout(() => {
          // A 2xx whose body is still arriving was answered in time: the status decides.
          if (status !== null) finish(outcomeOf(status), errorOf(status));
          else finish('timeout', `no answer within ${timeoutMs} ms`);
          request.destroy();
        }, timeoutMs);
        const onAbort = () => {
          finish('network_error', 'stopped', true);
          request.destroy();
        };
        signal.addEventListener('abort', onAbort);
        if (signal.aborted) return onAbort();
        request.on('error', (error) => finish('network_error', networkError(error)));
        request.on('response', (response) => {
          status = response.statusCode ?? 0;
          let read = 0;
          response.on('data', (chunk: Buffer) => {
            read += chunk.length;
            if (read > ANSWER_BODY_LIMIT) {
              finish(outcomeOf(status!), errorOf(status!));
              response.destroy();
            }
          });
          response.on('error', () => finish(outcomeOf(status!), errorOf(status!)));
          response.on('end', () => finish(outcomeOf(status!), errorOf(status!)));
          response.on('close', () => finish(outcomeOf(status!), errorOf(status!)));
        });
        request.end(body);
      }),
  );
}

function outcomeOf(status: number): AttemptResult {
  if (status >= 200 && status < 300) return 'success';
  return status >= 300 && status < 400 ? 'redirect' : 'http_error';
}

function errorOf(status: number): string | null {
  if (status >= 200 && status < 300) return null;
  if (status >= 300 && status < 400) return `HTTP ${status}: a redirect, never followed`;
  return `HTTP ${status}`;
}
