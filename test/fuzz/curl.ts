import type { ConcreteRequest } from './transport.js';

const KEY_MARK = '@@PETSTORE_KEY@@';

/** A shell word holding `bytes` exactly: '…' when printable ASCII, else $'…' with \x escapes. */
function quote(bytes: Buffer): string {
  const text = bytes.toString('latin1');
  if (/^[\x20-\x7e]*$/.test(text)) return `'${text.replace(/'/g, `'\\''`)}'`;
  return `$'${[...bytes].map((b) => (b >= 0x20 && b < 0x7f && b !== 0x27 && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, '0')}`)).join('')}'`;
}

/**
 * The request as a curl command line, byte for byte, to replay a fuzz failure by hand against
 * `base` (the API key shown as `$PETSTORE_KEY`).
 *
 * @example toCurl('http://127.0.0.1:8080', { method: 'GET', url: '/v1/pets', headers: {} })
 * // curl -i --path-as-is -g -X GET 'http://127.0.0.1:8080/v1/pets'
 */
export function toCurl(base: string, request: ConcreteRequest, key?: string): string {
  const words = ['curl -i --path-as-is -g'];
  words.push(request.method === 'HEAD' ? '--head' : `-X ${request.method}`);
  words.push(quote(Buffer.from(base + request.url, 'latin1')));
  const named = new Set(Object.keys(request.headers).map((name) => name.toLowerCase()));
  for (const [name, value] of Object.entries(request.headers)) {
    const shown = key ? value.split(key).join(KEY_MARK) : value;
    const word = quote(Buffer.from(value === '' ? `${name};` : `${name}: ${shown}`, 'latin1'));
    // Close the quote, expand the variable, reopen a quote of the same kind.
    const reopen = word.startsWith('$') ? "$'" : "'";
    words.push(`-H ${word.split(KEY_MARK).join(`'"$PETSTORE_KEY"${reopen}`)}`);
  }
  // curl would add a Content-Type of its own to a body sent without one.
  if (request.body !== undefined && !named.has('content-type')) words.push("-H 'Content-Type:'");
  if (request.body === undefined) return words.join(' ');
  // printf %b reads backslash escapes: every other printable ASCII byte stands for itself.
  const escaped = [...request.body]
    .map((b) =>
      b >= 0x20 && b < 0x7f && b !== 0x27 && b !== 0x5c
        ? String.fromCharCode(b)
        : `\\x${b.toString(16).padStart(2, '0')}`,
    )
    .join('');
  return `printf '%b' '${escaped}' | ${words.join(' ')} --data-binary @-`;
}

/** Bytes that curl cannot send (bent HTTP framing), as a netcat command line. */
export function toNetcat(base: string, bytes: Buffer): string {
  const { hostname, port } = new URL(base);
  const escaped = [...bytes]
    .map((b) =>
      b >= 0x20 && b < 0x7f && b !== 0x27 && b !== 0x5c
        ? String.fromCharCode(b)
        : `\\x${b.toString(16).padStart(2, '0')}`,
    )
    .join('');
  return `printf '%b' '${escaped}' | nc ${hostname} ${port}`;
}
