import assert from 'node:assert/strict';
import { connect } from 'node:net';

/**
 * Writes `request` as raw bytes, half-closes, and resolves with every byte the server sends
 * before closing; rejects when nothing came back, or when the server is still open after
 * `timeoutMs`.
 */
export function exchangeBytes(port: number, request: string | Buffer, timeoutMs = 10_000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port, host: '127.0.0.1' });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no complete answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const done = (error?: Error) => {
      clearTimeout(timer);
      if (error && chunks.length === 0) reject(error);
      else resolve(Buffer.concat(chunks));
    };
    socket.on('data', (chunk) => chunks.push(chunk));
    // A server that answers before reading the whole body may reset the connection after its answer.
    socket.on('error', done);
    socket.on('end', () => done());
    socket.end(request);
  });
}

/** `exchangeBytes`, as UTF-8 text. */
export async function exchange(port: number, request: string | Buffer): Promise<string> {
  return (await exchangeBytes(port, request)).toString('utf8');
}

export interface RawResponse {
  statusLine: string;
  headers: Map<string, string>;
  body: string;
}

export function parseResponse(raw: string): RawResponse {
  const split = raw.indexOf('\r\n\r\n');
  assert.ok(split > 0, `no header section in ${JSON.stringify(raw)}`);
  const [statusLine, ...lines] = raw.slice(0, split).split('\r\n');
  const headers = new Map(
    lines.map((line) => {
      const colon = line.indexOf(':');
      return [line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim()] as const;
    }),
  );
  return { statusLine: statusLine!, headers, body: raw.slice(split + 4) };
}

/** Asserts a raw Error response: status line, JSON type, exact length and the exact body shape. */
export function assertRawError(raw: string, statusLine: string, code: string, status: number) {
  const response = parseResponse(raw);
  assert.equal(response.statusLine, statusLine);
  assert.match(response.headers.get('content-type') ?? '', /^application\/json(;|$)/);
  assert.equal(response.headers.get('content-length'), String(Buffer.byteLength(response.body)));
  assert.match(response.body, new RegExp(`^\\{"code":"${code}","message":"[^"\\\\]+","status":${status}\\}$`));
  return response;
}

export interface StreamedResponse extends RawResponse {
  status: number;
  /** Interim (1xx) answers that came before it, by status. */
  interim: number[];
}

const STATUS_LINE = /^HTTP\/1\.1 ([1-5][0-9]{2}) [\x20-\x7e]*$/;
const FIELD_LINE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+:[\t\x20-\x7e\x80-\xff]*$/;
export const ERROR_BODY = /^\{"code":"[a-z_]+","message":"(?:[^"\\]|\\.)+","status":([0-9]{3})\}$/;

/**
 * Splits what a server sent on one connection into its HTTP/1.1 answers, the n-th final answer
 * framed as the answer to `methods[n]` (no body for HEAD, 1xx, 204 and 304; else Content-Length,
 * chunked, or until the close). Throws, naming what is wrong, at the first byte that is not a
 * well-formed answer: a status line, field lines, a body of the length announced; an error
 * (4xx, 5xx) with a body must carry the JSON Error body of its own status. `truncated` is true
 * when the bytes end inside an answer (only acceptable when the client cut the connection).
 */
export function parseResponses(raw: Buffer, methods: string[]): { responses: StreamedResponse[]; truncated: boolean } {
  const responses: StreamedResponse[] = [];
  let interim: number[] = [];
  let at = 0;
  while (at < raw.length) {
    const end = raw.indexOf('\r\n\r\n', at);
    if (end < 0) return { responses, truncated: true };
    const [statusLine, ...lines] = raw.subarray(at, end).toString('latin1').split('\r\n');
    const status = STATUS_LINE.exec(statusLine!);
    if (!status)
      throw new Error(`answer ${responses.length}: not an HTTP/1.1 status line: ${JSON.stringify(statusLine)}`);
    const headers = new Map<string, string>();
    for (const line of lines) {
      if (!FIELD_LINE.test(line))
        throw new Error(`answer ${responses.length}: not a field line: ${JSON.stringify(line)}`);
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).toLowerCase();
      if (headers.has(name) && name !== 'set-cookie') throw new Error(`answer ${responses.length}: ${name} twice`);
      headers.set(name, line.slice(colon + 1).trim());
    }
    at = end + 4;
    const code = Number(status[1]);
    if (code < 200) {
      interim.push(code);
      continue;
    }
    const method = methods[responses.length];
    if (method === undefined) throw new Error(`answer ${responses.length} to no request: ${statusLine}`);
    const length = headers.get('content-length');
    if (length !== undefined && !/^[0-9]+$/.test(length)) throw new Error(`Content-Length ${JSON.stringify(length)}`);
    let body: Buffer;
    if (method === 'HEAD' || code === 204 || code === 304) {
      body = Buffer.alloc(0);
    } else if (headers.get('transfer-encoding') === 'chunked') {
      const parts: Buffer[] = [];
      for (;;) {
        const lineEnd = raw.indexOf('\r\n', at);
        if (lineEnd < 0) return { responses, truncated: true };
        const size = raw.subarray(at, lineEnd).toString('latin1');
        if (!/^[0-9a-fA-F]+$/.test(size))
          throw new Error(`answer ${responses.length}: chunk size ${JSON.stringify(size)}`);
        const n = parseInt(size, 16);
        if (lineEnd + 2 + n + 2 > raw.length) return { responses, truncated: true };
        parts.push(raw.subarray(lineEnd + 2, lineEnd + 2 + n));
        at = lineEnd + 2 + n + 2;
        if (n === 0) break;
      }
      body = Buffer.concat(parts);
    } else if (length !== undefined) {
      if (at + Number(length) > raw.length) return { responses, truncated: true };
      body = raw.subarray(at, at + Number(length));
      at += Number(length);
    } else {
      // Delimited by the close: only the last answer, on a connection it closes.
      if (!/close/i.test(headers.get('connection') ?? '')) {
        throw new Error(`answer ${responses.length}: no framing and no Connection: close`);
      }
      body = raw.subarray(at);
      at = raw.length;
    }
    const text = body.toString('utf8');
    if (code >= 400 && method !== 'HEAD') {
      if (!/^application\/json(;|$)/.test(headers.get('content-type') ?? '')) {
        throw new Error(`answer ${responses.length}: ${code} without a JSON body: ${headers.get('content-type')}`);
      }
      const error = ERROR_BODY.exec(text);
      if (!error || Number(error[1]) !== code)
        throw new Error(`answer ${responses.length}: not the ${code} Error body: ${text}`);
    }
    responses.push({ statusLine: statusLine!, status: code, headers, body: text, interim });
    interim = [];
  }
  return { responses, truncated: interim.length > 0 };
}
