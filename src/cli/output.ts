/** Where a command writes: standard output and standard error, one line per call. */
export interface Output {
  out: (line: string) => void;
  err: (line: string) => void;
}

/**
 * The process's standard output and standard error. A reader that goes away (`petstore keys
 * list | head -1`) is not an error: what is left to write to it is dropped, and the command
 * finishes as it would have.
 */
export function processOutput(): Output {
  const closed = new Set<NodeJS.WriteStream>();
  for (const stream of [process.stdout, process.stderr]) {
    stream.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE') throw error;
      closed.add(stream);
    });
  }
  const write = (stream: NodeJS.WriteStream, line: string) => {
    if (!closed.has(stream)) stream.write(line + '\n');
  };
  return {
    out: (line) => write(process.stdout, line),
    err: (line) => write(process.stderr, line),
  };
}

// JSON.stringify leaves DEL, the C1 controls, the line separators and the bidirectional
// controls as they are; written as \u escapes, the line is the same JSON and cannot drive a
// terminal either.
const TERMINAL_CONTROLS = /[\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** One JSON line for standard output, with every character a terminal acts on escaped. */
export const jsonLine = (value: unknown) =>
  JSON.stringify(value).replace(TERMINAL_CONTROLS, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

/** An instant as a JSON line carries it: ISO 8601, or null. */
export const isoOrNull = (date: Date | null) => date?.toISOString() ?? null;

/** How a list command shows each row: its JSON object (`--json`), or its table's columns. */
export interface RowView<T> {
  json: (row: T) => unknown;
  header: string[];
  cells: (row: T) => (string | number)[];
}

/**
 * `rows` as a list command prints them: one JSON line each with `--json`, else a table, the
 * header then a line per row, its cells tab-separated.
 */
export function printRows<T>(io: Output, json: boolean | undefined, rows: readonly T[], view: RowView<T>): void {
  if (json) {
    for (const row of rows) io.out(jsonLine(view.json(row)));
    return;
  }
  io.out(view.header.join('\t'));
  for (const row of rows) io.out(view.cells(row).join('\t'));
}
