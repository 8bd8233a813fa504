import type { Metric, Registry } from 'prom-client';

type Labels = { operation: string; method: string; status: string };

interface Series {
  labels: Labels;
  count: number;
  sum: number;
  /** Answers per bucket (not cumulative): the first bound each duration fits under. */
  perBucket: Float64Array;
}

interface Value {
  value: number;
  labels: Record<string, string | number>;
  sharedLabels?: Labels;
  metricName?: string;
  exemplar?: null;
}

/**
 * How many requests were answered, and how long each took, by operation, method and status:
 * `petstore_http_requests_total` and `petstore_http_request_duration_seconds`, written out by
 * prom-client's registry as its own Counter and Histogram would be. Counted in plain numbers:
 * prom-client's classes validate and hash a label object on every call, on every request.
 */
export class AnswerMetrics {
  readonly #buckets: readonly number[];
  #series = new Map<string, Series>();

  constructor(buckets: readonly number[]) {
    this.#buckets = buckets;
  }

  /** Counts one answered request that took `seconds`. */
  observe(operation: string, method: string, status: number, seconds: number): void {
    const key = `${operation} ${method} ${status}`;
    let series = this.#series.get(key);
    if (series === undefined) {
      const labels = { operation, method, status: String(status) };
      series = { labels, count: 0, sum: 0, perBucket: new Float64Array(this.#buckets.length) };
      this.#series.set(key, series);
    }
    series.count += 1;
    series.sum += seconds;
    for (let i = 0; i < this.#buckets.length; i++) {
      if (seconds <= this.#buckets[i]!) {
        series.perBucket[i]! += 1;
        break;
      }
    }
  }

  /** Registers both metrics in `registry`. */
  register(
    registry: Registry,
    names: { requests: string; duration: string },
    help: { requests: string; duration: string },
  ) {
    const counterInfo = { name: names.requests, help: help.requests, type: 'counter', aggregator: 'sum' };
    const counter = {
      ...counterInfo,
      get: async () => ({
        ...counterInfo,
        values: [...this.#series.values()].map(({ labels, count }): Value => ({ labels: { ...labels }, value: count })),
      }),
      reset: () => undefined,
    };
    const histogramInfo = { name: names.duration, help: help.duration, type: 'histogram', aggregator: 'sum' };
    const histogram = {
      ...histogramInfo,
      getForPromString: async () => ({ ...histogramInfo, values: this.#histogramValues(names.duration) }),
      // The JSON form (registry.getMetricsAsJSON) has each value's labels in one object.
      get: async () => ({
        ...histogramInfo,
        values: this.#histogramValues(names.duration).map(({ sharedLabels, labels, ...value }) => ({
          ...value,
          labels: { ...labels, ...sharedLabels },
        })),
      }),
      reset: () => undefined,
    };
    registry.registerMetric(counter as unknown as Metric);
    registry.registerMetric(histogram as unknown as Metric);
  }

  // As prom-client's Histogram: cumulative buckets, `+Inf`, then sum and count, per series.
  #histogramValues(name: string): Value[] {
    const values: Value[] = [];
    for (const { labels, count, sum, perBucket } of this.#series.values()) {
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
