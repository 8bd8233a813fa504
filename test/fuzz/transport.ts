import { connect } from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { WireResponse } from './document.js';

/** A request with every placeholder filled in, ready to go on the wire. */
export interface ConcreteRequest {
  method: string;
  url: string;
  headers: Record<string, string>;
  body?: Uint8Array;
}

export type Send = (request: ConcreteRequest) => Promise<WireResponse>;

export interface Transport {
  send: Send;
  /** The request target as the server receives it, which is what the document is checked against. */
  received: (url: string) => string;
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
  const received = (url: string) => {
    const parsed = new URL(url, 'http://localhost');
    return parsed.pathname + parsed.search;
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

/** The request as bytes on the wire, one per connection. */
export function serialize({ method, url, headers, body }: ConcreteRequest): Buffer {
  const lines = [`${method} ${url} HTTP/1.1`, 'Host: 127.0.0.1'];
  for (const [name, value] of Object.entries(headers)) lines.push(`${name}: ${value}`);
  if (body !== undefined) lines.push(`Content-Length: ${body.length}`);
  lines.push('Connection: close', '', '');
  return Buffer.concat([Buffer.from(lines.join('\r\n'), 'latin1'), body ?? Buffer.alloc(0)]);
}

/** Sends each request as raw bytes over a fresh TCP connection to `port`; the URL arrives as written. */
export function socketTransport(port: number, timeoutMs = 10_000): Transport {
  return {
    send: (request) => sendRaw(port, serialize(request), request.method, timeoutMs),
    received: (url) => url,
  };
}

/** Sends raw bytes over a fresh TCP connection to `port` and reads until the server closes it. */

export function sendRaw(port: number, bytes: Buffer, method: string, timeoutMs = 10_000): Promise<WireResponse> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const finish = () => {
      clearTimeout(timer);
      try {
        resolve(parseRawResponse(Buffer.concat(chunks), method));
      } catch (error) {
        reject(error as Error);
      }
    };
    socket.on('data', (chunk) => chunks.push(chunk));
    // A server that answers before reading the whole body may reset the connection after its answer.
    socket.on('error', finish);
    socket.on('end', finish);
    socket.end(bytes);
  });
}
