import type { Metric, Registry } from 'prom-client';

type Labels = Record<string, string>;

/** One set of label values: how many durations, their sum, and how many fell in each bucket. */
export class Series {
  count = 0;
  sum = 0;
  /** Observations per bucket (not cumulative): the first bound each duration fits under. */
  readonly perBucket: Float64Array;

  constructor(
    readonly labels: Labels,
    private readonly buckets: readonly number[],
  ) {
    this.perBucket = new Float64Array(buckets.length);
  }

  observe(seconds: number): void {
    this.count += 1;
    this.sum += seconds;
    for (let i = 0; i < this.buckets.length; i++) {
      if (seconds <= this.buckets[i]!) {
        this.perBucket[i]! += 1;
        break;
      }
    }
  }
}

interface Value {
  value: number;
  labels: Record<string, string | number>;
  sharedLabels?: Labels;
  metricName?: string;
  exemplar?: null;
}

interface Names {
  name: string;
  help: string;
}

/**
 * Durations by label values, kept in plain numbers and written out by prom-client's registry as
 * its own Histogram would write them (and, when asked, a Counter of the same observations).
 * prom-client's classes validate and hash a label object on every call; here a caller keeps
 * the `Series` of its labels, or finds it by a key string of its own.
 *
 * @example
 * const durations = new Durations([0.01, 0.1]);
 * durations.register(registry, { name: 'task_seconds', help: 'Task time.' });
 * const ok = durations.series('send ok', () => ({ task: 'send', outcome: 'ok' }));
 * ok.observe(0.004); // task_seconds_bucket{le="0.01",task="send",outcome="ok"} 1
 */
export class Durations {
  readonly #buckets: readonly number[];
  // Series appear in the output once observed, as prom-client's do.
  readonly #series = new Map<string, Series>();

  constructor(buckets: readonly number[]) {
    this.#buckets = buckets;
  }

  /** The series `key` names, if there is one yet. */
  find(key: string): Series | undefined {
    return this.#series.get(key);
  }

  /** A new series named `key`, with these label values. */
  add(key: string, labels: Labels): Series {
    const series = new Series(labels, this.#buckets);
    this.#series.set(key, series);
    return series;
  }

  /** The series `key` names; `labels` makes its label values the first time. */
  series(key: string, labels: () => Labels): Series {
    return this.find(key) ?? this.add(key, labels());
  }

  /** Registers the histogram in `registry`, and with `counter` a counter of its observations. */
  register(registry: Registry, histogram: Names, counter?: Names): void {
    const observed = () => [...this.#series.values()].filter((series) => series.count > 0);
    if (counter) {
      const counterInfo = { name: counter.name, help: counter.help, type: 'counter', aggregator: 'sum' };
      const counterMetric = {
        ...counterInfo,
        get: async () => ({
          ...counterInfo,
          values: observed().map(({ labels, count }): Value => ({ labels: { ...labels }, value: count })),
        }),
        reset: () => undefined,
      };
      registry.registerMetric(counterMetric as unknown as Metric);
    }
    const histogramInfo = { name: histogram.name, help: histogram.help, type: 'histogram', aggregator: 'sum' };
    const histogramMetric = {
      ...histogramInfo,
      getForPromString: async () => ({ ...histogramInfo, values: this.#histogramValues(histogram.name, observed()) }),
      // The JSON form (registry.getMetricsAsJSON) has each value's labels in one object.
      get: async () => ({
        ...histogramInfo,
        values: this.#histogramValues(histogram.name, observed()).map(({ sharedLabels, labels, ...value }) => ({
          ...value,
          labels: { ...labels, ...sharedLabels },
        })),
      }),
      reset: () => undefined,
    };
    registry.registerMetric(histogramMetric as unknown as Metric);
  }

  // As prom-client's Histogram: cumulative buckets, `+Inf`, then sum and count, per series.
  #histogramValues(name: string, observed: Series[]): Value[] {
    const values: Value[] = [];
    for (const { labels, count, sum, perBucket } of observed) {
      let cumulative = 0;
      this.#buckets.forEach((bound, i) => {
        cumulative += perBucket[i]!;
        values.push({
          labels: { le: bound },
          sharedLabels: labels,
          value: cumulative,
          metricName: `${name}_bucket`,
          exemplar: null,
        });
      });
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: labels, value: count, metricName: `${name}_bucket`, exemplar: null },
        { labels: {}, sharedLabels: labels, value: sum, metricName: `${name}_sum`, exemplar: undefined },
        { labels: {}, sharedLabels: labels, value: count, metricName: `${name}_count`, exemplar: undefined },
      );
    }
    return values;
  }
}

/**
 * How many requests were answered, and how long each took, by operation, method and status:
 * `petstore_http_requests_total` and `petstore_http_request_duration_seconds`.
 */
export class AnswerMetrics extends Durations {
  // Operation, then method, then status: finding an answer's series builds no key string.
  readonly #byAnswer = new Map<string, Map<string, Map<number, Series>>>();

  /** Counts one answered request that took `seconds`. */
  observe(operation: string, method: string, status: number, seconds: number): void {
    let byMethod = this.#byAnswer.get(operation);
    if (!byMethod) this.#byAnswer.set(operation, (byMethod = new Map()));
    let byStatus = byMethod.get(method);
    if (!byStatus) byMethod.set(method, (byStatus = new Map()));
    let series = byStatus.get(status);
    if (!series) {
      series = this.add(`${operation} ${method} ${status}`, { operation, method, status: String(status) });
      byStatus.set(status, series);
    }
    series.observe(seconds);
  }
}
