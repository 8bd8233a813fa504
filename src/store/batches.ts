import { context, ROOT_CONTEXT } from '@opentelemetry/api';

/**
 * The timing of a writer that works in batches off the request path: `schedule` sets a timer
 * (which never keeps the process alive) that runs `writeBatch` `everyMs` later when
 * `hasPending` says there is something to write; batches run one at a time, so a slow database
 * never has two of them in flight from one instance.
 * Batches run in OpenTelemetry's root context, whoever noted what they write: they are work of
 * the process, not of the request that happened to set the timer, so they are never a child
 * span of it (docs/operations.md#tracing). The timer is set in the root context too, so it
 * keeps no request's context alive while it waits.
 *
 * @example
 * const batches = writeInBatches(writeBatch, () => pending.size > 0, 200);
 * batches.schedule(); // after noting something
 * await batches.close(); // writes what is pending, schedules nothing after
 */
export function writeInBatches(writeBatch: () => Promise<void>, hasPending: () => boolean, everyMs: number) {
  let timer: NodeJS.Timeout | undefined;
  let writing: Promise<void> = Promise.resolve();
  let closed = false;

  function flush(): Promise<void> {
    clearTimeout(timer);
    timer = undefined;
    writing = context.with(ROOT_CONTEXT, () => writing.then(writeBatch));
    return writing;
  }

  function setTimer(): NodeJS.Timeout {
    const set = setTimeout(() => void flush(), everyMs);
    set.unref();
    return set;
  }

  return {
    schedule(): void {
      if (timer || closed || !hasPending()) return;
      timer = context.with(ROOT_CONTEXT, setTimer);
    },
    /** Writes what is pending now, instead of at the next tick of the timer. */
    flush,
    /** Writes what is pending, once more, and schedules nothing after. */
    close(): Promise<void> {
      closed = true;
      return flush();
    },
  };
}

/**
 * Calls made during one turn of the event loop, run together: `runAll` gets their inputs in the
 * order of the calls and settles each at the same index. When it throws, every call fails with
 * its error. Batches are not serialised: one may start while the one before is in flight.
 * With `keyOf`, calls of one batch whose inputs have the same key are run once (the first of
 * them goes to `runAll`) and settle with the same outcome, the same object: callers must not
 * change it.
 * A batch of calls from several callers runs in OpenTelemetry's root context: its work serves
 * them all, so it is a child of none of their spans (docs/operations.md#tracing). A batch of
 * one call runs in that caller's context, as the call alone would.
 *
 * @example
 * const insertPet = groupCalls(async (pets) => (await insertAll(pets)).map((value) => ({ status: 'fulfilled', value })));
 * await Promise.all([insertPet(a), insertPet(b)]); // one runAll([a, b])
 */
export function groupCalls<I, O>(
  runAll: (inputs: I[]) => Promise<PromiseSettledResult<O>[]>,
  keyOf?: (input: I) => string,
) {
  let queue: { input: I; resolve: (output: O) => void; reject: (error: unknown) => void }[] = [];
  const running = new Set<Promise<void>>();

  /** The inputs runAll gets, and for each call the index of its outcome (its own without keyOf). */
  function distinct(batch: typeof queue): { inputs: I[]; outcomeOf?: number[] } {
    if (!keyOf) return { inputs: batch.map((call) => call.input) };
    const indexes = new Map<string, number>();
    const inputs: I[] = [];
    const outcomeOf = batch.map(({ input }) => {
      const key = keyOf(input);
      let index = indexes.get(key);
      if (index === undefined) {
        index = inputs.push(input) - 1;
        indexes.set(key, index);
      }
      return index;
    });
    return { inputs, outcomeOf };
  }

  function flush() {
    const batch = queue;
    queue = [];
    if (batch.length === 0) return;
    const { inputs, outcomeOf } = distinct(batch);
    const started = batch.length === 1 ? runAll(inputs) : context.with(ROOT_CONTEXT, runAll, undefined, inputs);
    const run = started.then(
      (outcomes) =>
        batch.forEach((call, i) => {
          const outcome = outcomes[outcomeOf ? outcomeOf[i]! : i];
          if (outcome?.status === 'fulfilled') call.resolve(outcome.value);
          else call.reject(outcome ? outcome.reason : new Error(`no outcome for call ${i} of ${batch.length}`));
        }),
      (error: unknown) => batch.forEach((call) => call.reject(error)),
    );
    running.add(run);
    void run.finally(() => running.delete(run));
  }

  return {
    call: (input: I) =>
      new Promise<O>((resolve, reject) => {
        // After the poll phase: every request read from the sockets in this turn joins the batch.
        if (queue.length === 0) setImmediate(flush);
        queue.push({ input, resolve, reject });
      }),
    /** Runs what is queued now and resolves once no batch is in flight (before closing the pool). */
    async settle(): Promise<void> {
      flush();
      await Promise.all(running);
    },
  };
}
