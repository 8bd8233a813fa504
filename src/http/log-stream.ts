import { createRequire } from 'node:module';
import { pino, type DestinationStream } from 'pino';

/** The sonic-boom release whose `write` rememberTailLength was checked against, line by line. */
export const CHECKED_SONIC_BOOM = '4.2.1';

/** pino's destination: a sonic-boom. */
export type Destination = ReturnType<typeof pino.destination>;

/** The parts of a sonic-boom (pino's destination) in string mode that its `write` uses. */
interface SonicBoomInternals {
  write(data: string): boolean;
  emit(event: 'drop', data: string): boolean;
  destroyed: boolean;
  minLength: number;
  maxLength: number;
  maxWrite: number;
  _bufs: string[];
  _len: number;
  _hwm: number;
  _writing: boolean;
  _actualWrite(): void;
}

/** The version of the sonic-boom pino loads, from its package.json. */
export function sonicBoomVersion(): string {
  const fromPino = createRequire(createRequire(import.meta.url).resolve('pino'));
  return (fromPino('sonic-boom/package.json') as { version: string }).version;
}

/**
 * Where the request log goes by default: standard output through pino's own destination
 * (sonic-boom, asynchronous, written out when the process exits; docs/operations.md "Logs"),
 * with its `write` made to remember the byte length of the chunk it is filling
 * (rememberTailLength).
 */
export function standardOutput(): DestinationStream {
  const destination = pino.destination({ dest: 1 });
  if (sonicBoomVersion() === CHECKED_SONIC_BOOM) rememberTailLength(destination);
  return destination;
}

/**
 * sonic-boom 4.2.1's `write` appends each line to the chunk waiting for the next write, after
 * measuring that whole chunk's UTF-8 length (`Buffer.byteLength`) to keep it within `maxWrite`.
 * Measuring copies the chunk, a string of joined lines, into a flat one: under load, while a
 * write is in flight, the chunk holds up to 16 KiB, so every line copied kilobytes and left
 * them to the garbage collector (bench/README.md, "The request log's destination"). This
 * `write` is sonic-boom's own, step for step, but for that one measurement: the length of the
 * chunk it last filled is remembered, and measured again only when the chunk waiting is another
 * string (sonic-boom's flush and flushSync also put chunks there). Applied only to the release
 * it was checked against (CHECKED_SONIC_BOOM).
 */
export function rememberTailLength(destination: Destination): void {
  let tail = '';
  let tailBytes = 0;
  (destination as unknown as SonicBoomInternals).write = function write(
    this: SonicBoomInternals,
    line: string,
  ): boolean {
    if (this.destroyed) throw new Error('SonicBoom destroyed');
    const data = '' + line;
    const dataLen = Buffer.byteLength(data);
    const len = this._len + dataLen;
    const bufs = this._bufs;
    if (this.maxLength && len > this.maxLength) {
      this.emit('drop', data);
      return this._len < this._hwm;
    }
    const last = bufs.length - 1;
    // Equal strings have equal lengths; the same string object compares at once.
    const lastBytes = last < 0 ? 0 : bufs[last] === tail ? tailBytes : Buffer.byteLength(bufs[last]!);
    if (last < 0 || lastBytes + dataLen > this.maxWrite) {
      bufs.push(data);
      tail = data;
      tailBytes = dataLen;
    } else {
      tail = bufs[last] += data;
      tailBytes = lastBytes + dataLen;
    }
    this._len = len;
    if (!this._writing && this._len >= this.minLength) this._actualWrite();
    return this._len < this._hwm;
  };
}
