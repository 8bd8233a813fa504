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
