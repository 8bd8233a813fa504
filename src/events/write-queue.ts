import { context, ROOT_CONTEXT } from '@opentelemetry/api';

/**
 * Items written as they come, in batches, one batch at a time and with no timer: an item waits
 * at most for the end of the turn it came in (so the items of one turn go together) or for the
 * batch being written, and those that came meanwhile go in the next batch, as soon as that one
 * ends. `write` settles each item of its batch at the same index; when it throws, every item of
 * the batch fails with its error. Batches run in OpenTelemetry's root context: they serve every
 * caller, and are a child of none.
 *
 * @example
 * const outcomes = writeQueue((items) => store.webhooks.finish({ owner, retryMs, outcomes: items }).then(...));
 * await outcomes.push(outcome); // written with whatever else ended in the same turn
 */
export function writeQueue<I, O>(write: (items: I[]) => Promise<O[]>) {
  let queue: { item: I; resolve: (output: O) => void; reject: (error: unknown) => void }[] = [];
  let writing: Promise<void> | undefined;
  let scheduled = false;

  const flush = async () => {
    const batch = queue;
    queue = [];
    try {
      const outputs = await write(batch.map(({ item }) => item));
      for (const [i, { resolve }] of batch.entries()) resolve(outputs[i]!);
    } catch (error) {
      for (const { reject } of batch) reject(error);
    }
  };

  const run = () => {
    scheduled = false;
    writing = context.with(ROOT_CONTEXT, async () => {
      while (queue.length > 0) await flush();
      writing = undefined;
    });
  };

  return {
    push(item: I): Promise<O> {
      return new Promise<O>((resolve, reject) => {
        queue.push({ item, resolve, reject });
        if (writing || scheduled) return;
        scheduled = true;
        setImmediate(run);
      });
    },
    /** Resolves once every item pushed so far is written (or failed). */
    async idle(): Promise<void> {
      while (scheduled || writing) await (writing ?? new Promise((resolve) => setImmediate(resolve)));
    },
  };
}
