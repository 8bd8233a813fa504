import { exchangeBytes } from '../raw.js';
import type { FastifyInstance } from 'fastify';
import type { WireResponse } from './document.js';
import type { WireFault } from './requests.js';

/** A request with every placeholder filled in, ready to go on the wire. */
export interface ConcreteRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Uint8Array;
  wire?: WireFault;
}

export type Send = (request: ConcreteRequest) => Promise<WireResponse>;

export interface Transport {
  send: Send;
  /** The method and target as the server receives them, which is what the document is checked against. */
  received: (request: ConcreteRequest) => { method: string; url: string };
  /** True when requests go out with their wire faults. */
  faults?: boolean;
}

function flatten(headers: Record<string, string | string[] | number | undefined>): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined) flat[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return flat;
}

/**
 * Sends through Fastify's `inject`: the whole app, no socket. Its URL goes through WHATWG URL
 * parsing first, which removes dot segments (`/v1/pets/..` arrives as `/v1/`).
 */
export function injectTransport(app: FastifyInstance): Transport {
  const received = ({ method, url }: ConcreteRequest) => {
    const parsed = new URL(url, 'http://localhost');
    return { method, url: parsed.pathname + parsed.search };
  };
  const send: Send = async ({ method, url, headers, body }) => {
    const response = await app.inject({
      method: method as 'GET',
      url,
      headers,
      ...(body !== undefined && { payload: Buffer.from(body) }),
    });
    return { status: response.statusCode, headers: flatten(response.headers), body: response.body };
  };
  return { send, received };
}

function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const lineEnd = raw.indexOf('\r\n', at);
    if (lineEnd < 0) break;
    const size = parseInt(raw.subarray(at, lineEnd).toString('latin1'), 16);
    if (!(size > 0)) break;
    parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + size));
    at = lineEnd + 2 + size + 2;
  }
  return Buffer.concat(parts);
}

/** Parses one HTTP/1.1 response as read until the server closed the connection. */
export function parseRawResponse(raw: Buffer, method: string): WireResponse {
  // Interim answers (100 Continue) come first; the final one follows.
  while (/^HTTP\/1\.1 1[0-9]{2} /.test(raw.subarray(0, 13).toString('latin1'))) {
    raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
  }
  const split = raw.indexOf('\r\n\r\n');
  if (split < 0) throw new Error(`no complete response: ${JSON.stringify(raw.toString('latin1').slice(0, 200))}`);
  const [statusLine, ...lines] = raw.subarray(0, split).toString('latin1').split('\r\n');
  const status = /^HTTP\/1\.1 ([0-9]{3})/.exec(statusLine!);
  if (!status) throw new Error(`not an HTTP/1.1 status line: ${statusLine}`);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  let body = raw.subarray(split + 4);
  if (method === 'HEAD') body = Buffer.alloc(0);
  else if (headers['transfer-encoding'] === 'chunked') body = dechunk(body);
  else if (headers['content-length'] !== undefined) body = body.subarray(0, Number(headers['content-length']));
  return { status: Number(status[1]), headers, body: body.toString('utf8') };
}

/** The method a request goes out with once `wire` has bent it. */
export function wireMethod({ method, wire }: Pick<ConcreteRequest, 'method' | 'wire'>): string {
  if (wire === 'unknown-method') return 'BREW';
  if (wire === 'lowercase-method') return method.toLowerCase();
  if (wire === 'connect') return 'CONNECT';
  return method;
}

/** The request as bytes on the wire, one per connection, with its framing bent as `wire` says. */
export function serialize({ method, url, headers, body, wire }: ConcreteRequest): Buffer {
  const verb = wireMethod({ method, wire });
  const target = wire === 'space-in-target' ? `${url} x` : wire === 'absolute-target' ? `http://127.0.0.1${url}` : url;
  const lines = [`${verb} ${target} ${wire === 'http/1.0' ? 'HTTP/1.0' : 'HTTP/1.1'}`];
  if (wire !== 'no-host') lines.push('Host: 127.0.0.1');
  if (wire === 'unknown-expect') lines.push('Expect: teapot');
  if (wire === 'expect-continue') lines.push('Expect: 100-continue');
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  if (wire === 'huge-header') lines.push(`X-Padding: ${'a'.repeat(17 * 1024)}`);
  if (wire === 'control-in-header') lines.push('X-Control: a\u0001b');
  let payload = Buffer.from(body ?? []);
  if (wire === 'chunked' && body !== undefined) {
    lines.push('Transfer-Encoding: chunked');
    const half = payload.length >> 1;
    const chunk = (part: Buffer) =>
      part.length ? [Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n')] : [];
    payload = Buffer.concat([
      ...chunk(payload.subarray(0, half)),
      ...chunk(payload.subarray(half)),
      Buffer.from('0\r\n\r\n'),
    ]);
  } else if (body !== undefined && wire !== 'no-length') {
    // Declared one byte short, the last byte is left over after the request (and the connection closes).
    lines.push(`Content-Length: ${wire === 'short-length' ? Math.max(0, body.length - 1) : body.length}`);
  }
  lines.push('Connection: close', '', '');
  return Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), payload]);
}

/** Sends each request as raw bytes over a fresh TCP connection to `port`; the URL arrives as written. */
export function socketTransport(port: number, timeoutMs = 10_000): Transport {
  return {
    send: (request) => sendRaw(port, serialize(request), wireMethod(request), timeoutMs),
    received: (request) => ({ method: wireMethod(request), url: request.url }),
    faults: true,
  };
}

/** Sends raw bytes over a fresh TCP connection to `port` and reads until the server closes it. */
export async function sendRaw(port: number, bytes: Buffer, method: string, timeoutMs = 10_000): Promise<WireResponse> {
  return parseRawResponse(await exchangeBytes(port, bytes, timeoutMs), method);
}
