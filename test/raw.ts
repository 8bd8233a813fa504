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
