import { isIP } from 'node:net';

/** One setting: where it comes from, what it means, its default and how it is read. */
interface Setting<T> {
  env: string;
  description: string;
  format: string;
  default: string | undefined;
  parse: (raw: string, env: NodeJS.ProcessEnv) => T;
  /** Computes the default from the settings listed before it; `default` then describes it. */
  derive?: (values: Record<string, unknown>) => string;
  /** How the raw value may appear in an error message, when it can hold a secret. */
  show?: (raw: string) => string;
}

export class ConfigError extends Error {}

const SUNSET_SECONDS = Date.UTC(2030, 11, 5) / 1000;

function integer(min: number, max: number) {
  return (raw: string) => {
    if (!/^[0-9]+$/.test(raw) || Number(raw) < min || Number(raw) > max) {
      throw new Error(`must be an integer from ${min} to ${max}`);
    }
    return Number(raw);
  };
}

/** An absolute http(s) URL ending in /v1 (docs/api.md#versions-and-base-address: the version segment is part of the base address). */
function baseUrl(raw: string) {
  const base = raw.replace(/\/+$/, '');
  let url: URL | undefined;
  try {
    url = new URL(base);
  } catch {
    url = undefined;
  }
  const web = url?.protocol === 'http:' || url?.protocol === 'https:';
  // The document's paths follow the base address: anything after /v1 would be lost or doubled.
  if (!url || !web || !url.pathname.endsWith('/v1') || url.search !== '' || url.hash !== '') {
    throw new Error('must be an absolute http or https URL ending in /v1, like https://api.example.com/v1');
  }
  return base;
}

/** A base address ending in /v1, or undefined when empty: no such server. */
function optionalBaseUrl(raw: string): string | undefined {
  return raw === '' ? undefined : baseUrl(raw);
}

/** A PostgreSQL URL, or undefined when empty (SQLite then). */
function postgresUrl(raw: string): string | undefined {
  if (raw === '') return undefined;
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new Error('must be a postgres:// or postgresql:// URL');
  }
  if (url.protocol !== 'postgres:' && url.protocol !== 'postgresql:') {
    throw new Error('must be a postgres:// or postgresql:// URL');
  }
  return raw;
}

/** Comma-separated PostgreSQL URLs (DATABASE_READ_URLS); none when empty. */
function postgresUrls(raw: string): string[] {
  const urls = raw
    .split(',')
    .map((entry) => entry.trim())
    .filter((entry) => entry !== '');
  for (const url of urls) {
    try {
      postgresUrl(url);
    } catch {
      throw new Error('must be postgres:// or postgresql:// URLs, comma-separated');
    }
  }
  return urls;
}

// libpq URL parameters that hold a secret: the password, and the passphrase of the client key.
const SECRET_PARAMETERS = /^(ssl)?password$/i;

/** The URL with its passwords hidden (user:***@, ?password=***), or nothing at all when it does not parse. */
function withoutPassword(raw: string): string {
  try {
    const url = new URL(raw);
    if (url.password) url.password = '***';
    for (const name of new Set(url.searchParams.keys())) {
      if (SECRET_PARAMETERS.test(name)) url.searchParams.set(name, '***');
    }
    return url.href;
  } catch {
    return '(a value that is not shown, as it may hold a password)';
  }
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** A whole number and a unit, s, m, h or d (`30d`, `12h`), from `min` to `max` ms, as ms. */
function duration(min: string, max: string) {
  const ms = (text: string) => {
    const match = /^([1-9][0-9]{0,6})([smhd])$/.exec(text);
    return match ? Number(match[1]) * UNIT_MS[match[2]!]! : undefined;
  };
  const [least, most] = [ms(min)!, ms(max)!];
  return (raw: string) => {
    const value = ms(raw);
    if (value === undefined || value < least || value > most) {
      throw new Error(`must be a whole number and a unit, s, m, h or d (30d), from ${min} to ${max}`);
    }
    return value;
  };
}

/** A positive integer up to `max`, or undefined for `off`. */
function integerOrOff(max: number) {
  const read = integer(1, max);
  return (raw: string) => {
    if (raw === 'off') return undefined;
    try {
      return read(raw);
    } catch {
      throw new Error(`must be an integer from 1 to ${max}, or off`);
    }
  };
}

/** A comma-separated list whose every entry `isValid` accepts, else `message`; empty for none. */
function listOf(isValid: (entry: string) => boolean, message: string) {
  return (raw: string): string[] => {
    const entries = raw
      .split(',')
      .map((entry) => entry.trim())
      .filter((entry) => entry !== '');
    if (!entries.every(isValid)) throw new Error(message);
    return entries;
  };
}

/** An IP address or a CIDR range (10.0.0.0/8). */
function isAddressOrRange(entry: string): boolean {
  const [address = '', prefix, ...rest] = entry.split('/');
  const version = isIP(address);
  const bits = version === 4 ? 32 : 128;
  const prefixOk = prefix === undefined || (/^[0-9]{1,3}$/.test(prefix) && Number(prefix) <= bits);
  return version !== 0 && prefixOk && rest.length === 0;
}

/** `*`, or an origin exactly as a browser sends it (https://shop.example). */
function isOrigin(entry: string): boolean {
  if (entry === '*') return true;
  try {
    return new URL(entry).origin === entry;
  } catch {
    return false;
  }
}

/** A host name (letters, digits, hyphens, dots) or an IP address, as a URL's host names it. */
function isHost(entry: string): boolean {
  const bare = entry.replace(/^\[(.*)\]$/, '$1');
  return isIP(bare) !== 0 || /^[a-z0-9]([a-z0-9-]{0,62})(\.[a-z0-9]([a-z0-9-]{0,62}))*\.?$/i.test(bare);
}

const addressList = listOf(isAddressOrRange, 'must be IP addresses or CIDR ranges (10.0.0.0/8), comma-separated');
const originList = listOf(isOrigin, 'must be origins like https://shop.example, comma-separated, or *');

const logLevels = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** Every setting the service reads, in the order `petstore serve --help` lists them. */
export const settings = {
  host: {
    env: 'HOST',
    description: 'Address to listen on.',
    format: 'IP address or host name',
    default: '127.0.0.1',
    parse: (raw) => raw,
  } satisfies Setting<string>,
  port: {
    env: 'PORT',
    description: 'TCP port to listen on (0 picks a free one).',
    format: 'integer 0..65535',
    default: '8080',
    parse: integer(0, 65535),
  } satisfies Setting<number>,
  sqlitePath: {
    env: 'PETSTORE_DB',
    description:
      'SQLite database file; serve and migrate create it, with its folder, when missing, and every other command refuses a missing one.',
    format: 'file path',
    default: './data/petstore.db',
    parse: (raw) => raw,
  } satisfies Setting<string>,
  databaseUrl: {
    env: 'DATABASE_URL',
    description: 'PostgreSQL database shared by every instance; when absent or empty, SQLite (PETSTORE_DB).',
    format: 'postgres://user:password@host:5432/database (libpq URL parameters allowed)',
    default: undefined,
    parse: postgresUrl,
    show: withoutPassword,
  } satisfies Setting<string | undefined>,
  databaseReadUrls: {
    env: 'DATABASE_READ_URLS',
    description:
      'PostgreSQL streaming replicas of DATABASE_URL that listPets, getPet and the feed read from while their replay lag is within PETSTORE_REPLICA_MAX_LAG_MS; writes, key checks, rate counts and idempotency stay on DATABASE_URL (docs/operations.md#read-replicas).',
    format: 'postgres:// URLs, comma-separated, each with the same libpq parameters as DATABASE_URL',
    default: '',
    parse: postgresUrls,
    show: (raw) => raw.split(',').map(withoutPassword).join(','),
  } satisfies Setting<string[]>,
  replicaMaxLagMs: {
    env: 'PETSTORE_REPLICA_MAX_LAG_MS',
    description:
      'How far a replica may be behind the primary and still be read from; one further behind, paused, unreachable or promoted is left out within a second, and taken back once it is within half of this.',
    format: 'milliseconds, integer 100..600000',
    default: '1000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  pgPoolSize: {
    env: 'PETSTORE_PG_POOL_SIZE',
    description: 'Most PostgreSQL connections one instance opens at once, to the primary and to each replica.',
    format: 'integer 1..1000',
    default: '10',
    parse: integer(1, 1000),
  } satisfies Setting<number>,
  dbTimeoutMs: {
    env: 'PETSTORE_DB_TIMEOUT_MS',
    description: 'Longest wait for a database connection or statement (SQLite: for a lock) before a request gets 503.',
    format: 'milliseconds, integer 100..600000',
    default: '5000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  publicUrl: {
    env: 'PETSTORE_PUBLIC_URL',
    description: 'Production base address, listed first in the OpenAPI document.',
    format: 'absolute URL ending in /v1',
    default: 'http://HOST:PORT/v1',
    derive: ({ host, port }) => `http://${String(host).includes(':') ? `[${host}]` : host}:${port}/v1`,
    parse: baseUrl,
  } satisfies Setting<string>,
  stagingUrl: {
    env: 'PETSTORE_STAGING_URL',
    description: 'Staging base address, listed second in the OpenAPI document; set it empty to list none.',
    format: 'absolute URL ending in /v1, or empty',
    default: 'http://127.0.0.1:8081/v1',
    parse: optionalBaseUrl,
  } satisfies Setting<string | undefined>,
  deprecationSeconds: {
    env: 'PETSTORE_GETPET_DEPRECATION',
    description: 'When getPet was deprecated (RFC 9745 Deprecation header); never after its sunset.',
    format: '@<unix seconds>',
    default: '@1767225600',
    parse: (raw) => {
      const match = /^@(0|[1-9][0-9]{0,11})$/.exec(raw);
      if (!match) throw new Error("must be '@' followed by unix seconds, like @1767225600");
      const seconds = Number(match[1]);
      if (seconds > SUNSET_SECONDS) throw new Error('must not be after the sunset, 2030-12-05 (@1922659200)');
      return seconds;
    },
  } satisfies Setting<number>,
  rateLimit: {
    env: 'PETSTORE_RATE_LIMIT',
    description:
      'Requests one API key may make per window, counted on all instances together (PostgreSQL) or in the process (SQLite); then 429.',
    format: 'integer 1..1000000000, or off',
    default: '6000',
    parse: integerOrOff(1_000_000_000),
  } satisfies Setting<number | undefined>,
  rateLimitWindowSeconds: {
    env: 'PETSTORE_RATE_LIMIT_WINDOW',
    description: 'Length of the fixed windows that PETSTORE_RATE_LIMIT and PETSTORE_AUTH_FAILURE_LIMIT count in.',
    format: 'seconds, integer 1..86400',
    default: '60',
    parse: integer(1, 86_400),
  } satisfies Setting<number>,
  authFailureLimit: {
    env: 'PETSTORE_AUTH_FAILURE_LIMIT',
    description:
      'Refused API keys one client address may send per window; past it, a further refused key from the address gets 429 instead of 401 (a valid key is still served).',
    format: 'integer 1..1000000000, or off',
    default: '60',
    parse: integerOrOff(1_000_000_000),
  } satisfies Setting<number | undefined>,
  trustProxy: {
    env: 'PETSTORE_TRUST_PROXY',
    description:
      'Load balancers or proxies whose X-Forwarded-For names the client address (for the per-address limit); none by default.',
    format: 'IP addresses or CIDR ranges, comma-separated',
    default: '',
    parse: addressList,
  } satisfies Setting<string[]>,
  headersTimeoutMs: {
    env: 'PETSTORE_HEADERS_TIMEOUT_MS',
    description:
      'Longest time a client may take to send the request line and headers; then 408 and the connection closes.',
    format: 'milliseconds, integer 100..600000',
    default: '10000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  requestTimeoutMs: {
    env: 'PETSTORE_REQUEST_TIMEOUT_MS',
    description:
      'Longest time a client may take to send a whole request, body included (at least PETSTORE_HEADERS_TIMEOUT_MS); then 408.',
    format: 'milliseconds, integer 100..600000',
    default: '30000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  maxConnections: {
    env: 'PETSTORE_MAX_CONNECTIONS',
    description:
      'Connection slots shared by all clients. While one is free, any client may take it, whatever its address; past them (and a few spare ones: a thirty-second, at least 4), the address group holding the most gives one up: one that sent nothing, else an idle one, else a busy one after its answer.',
    format: 'integer 1..1000000',
    default: '1024',
    parse: integer(1, 1_000_000),
  } satisfies Setting<number>,
  maxConnectionsPerAddress: {
    env: 'PETSTORE_MAX_CONNECTIONS_PER_ADDRESS',
    description:
      "A hard cap on the connections open at once from one client address, an IPv6 client counted by its /64 (PETSTORE_TRUST_PROXY peers excepted), even while slots are free; past it, the address's connection that has sent nothing makes room, or else the new one is refused. Off by default: slots are shared only when they run out.",
    format: 'integer 1..1000000, or off',
    default: 'off',
    parse: integerOrOff(1_000_000),
  } satisfies Setting<number | undefined>,
  stallTimeoutMs: {
    env: 'PETSTORE_STALL_TIMEOUT_MS',
    description:
      'Longest time a connection may wait on its client without progress (its answers not read, or a request body not arriving); then it is closed, a stalled body first answered 408.',
    format: 'milliseconds, integer 100..600000',
    default: '10000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  keepAliveTimeoutMs: {
    env: 'PETSTORE_KEEP_ALIVE_TIMEOUT_MS',
    description:
      "How long an idle keep-alive connection stays open for its next request; behind a proxy that reuses connections, set it above the proxy's idle timeout.",
    format: 'milliseconds, integer 100..600000',
    default: '5000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  corsOrigins: {
    env: 'PETSTORE_CORS_ORIGINS',
    description: 'Browser origins allowed to call the API (CORS); none by default, which turns CORS off.',
    format: 'origins like https://shop.example, comma-separated, or *',
    default: '',
    parse: originList,
  } satisfies Setting<string[]>,
  // OpenTelemetry's batch span processor, under the specification's names; read whether tracing
  // is on or not. Smaller than the SDK's defaults (2048, 512, 5000, 30000): what a collector that
  // is slow or down can make the service hold (docs/operations.md#tracing).
  spanQueueSize: {
    env: 'OTEL_BSP_MAX_QUEUE_SIZE',
    description: 'Most finished spans kept waiting for export (tracing on); past it, new spans are dropped.',
    format: 'integer 1..65536',
    default: '1024',
    parse: integer(1, 65_536),
  } satisfies Setting<number>,
  spanBatchSize: {
    env: 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE',
    description: 'Most spans sent in one export; a full batch is sent at once, without waiting for the delay.',
    format: 'integer 1..OTEL_BSP_MAX_QUEUE_SIZE',
    default: '256, at most OTEL_BSP_MAX_QUEUE_SIZE',
    derive: ({ spanQueueSize }) => String(Math.min(256, Number(spanQueueSize))),
    parse: integer(1, 65_536),
  } satisfies Setting<number>,
  spanScheduleDelayMs: {
    env: 'OTEL_BSP_SCHEDULE_DELAY',
    description: 'Longest time a finished span waits before it is sent with the others.',
    format: 'milliseconds, integer 1..3600000',
    default: '1000',
    parse: integer(1, 3_600_000),
  } satisfies Setting<number>,
  spanExportTimeoutMs: {
    env: 'OTEL_BSP_EXPORT_TIMEOUT',
    description: 'Longest time one export may take; then its spans are dropped and the next batch goes.',
    format: 'milliseconds, integer 1..600000',
    default: '10000',
    parse: integer(1, 600_000),
  } satisfies Setting<number>,
  eventRetentionMs: {
    env: 'PETSTORE_EVENT_RETENTION',
    description:
      'How long events are kept in the feed (GET /v1/events), delivered or not; older ones are deleted in the background, a bounded batch at a time. At least PETSTORE_WEBHOOK_GIVE_UP, so an event is kept while it may still be delivered.',
    format: 'whole number and a unit, s, m, h or d, from 1m to 3650d',
    default: '30d',
    parse: duration('1m', '3650d'),
  } satisfies Setting<number>,
  webhookDelivery: {
    env: 'PETSTORE_WEBHOOK_DELIVERY',
    description:
      'Whether this instance delivers webhooks (docs/webhooks.md); off: it serves the API and delivers nothing, the other instances deliver.',
    format: 'on or off',
    default: 'on',
    parse: (raw) => {
      if (raw !== 'on' && raw !== 'off') throw new Error('must be on or off');
      return raw === 'on';
    },
  } satisfies Setting<boolean>,
  webhookConcurrency: {
    env: 'PETSTORE_WEBHOOK_CONCURRENCY',
    description:
      'Most webhook attempts this instance has in flight at once, all endpoints together; each endpoint holds at most its share, and a quarter is kept for endpoints that answer (docs/webhooks.md#isolation).',
    format: 'integer 1..1000',
    default: '64',
    parse: integer(1, 1000),
  } satisfies Setting<number>,
  webhookTimeoutMs: {
    env: 'PETSTORE_WEBHOOK_TIMEOUT_MS',
    description: "Longest wait for a receiver's answer; an attempt that takes longer is a failure, retried.",
    format: 'milliseconds, integer 100..600000',
    default: '10000',
    parse: integer(100, 600_000),
  } satisfies Setting<number>,
  webhookRetryMs: {
    env: 'PETSTORE_WEBHOOK_RETRY_MS',
    description:
      'Wait before the first retry of a failed attempt; each further retry waits twice as long, with jitter (docs/webhooks.md#retries).',
    format: 'milliseconds, integer 10..86400000',
    default: '5000',
    parse: integer(10, 86_400_000),
  } satisfies Setting<number>,
  webhookGiveUpMs: {
    env: 'PETSTORE_WEBHOOK_GIVE_UP',
    description:
      'How long after its creation an event is retried before it is given up; an endpoint that failed every attempt for this long is disabled.',
    format: 'whole number and a unit, s, m, h or d, from 1s to 30d',
    default: '3d',
    parse: duration('1s', '30d'),
  } satisfies Setting<number>,
  webhookLeaseMs: {
    env: 'PETSTORE_WEBHOOK_LEASE_MS',
    description:
      'How long an attempt is held by the instance making it; an attempt a killed instance abandoned is made again by another (or by the restarted one) once it has passed. More than PETSTORE_WEBHOOK_TIMEOUT_MS.',
    format: 'milliseconds, integer 200..3600000',
    default: 'PETSTORE_WEBHOOK_TIMEOUT_MS + 5000',
    derive: ({ webhookTimeoutMs }) => String(Number(webhookTimeoutMs) + 5000),
    parse: integer(200, 3_600_000),
  } satisfies Setting<number>,
  webhookAllowHttp: {
    env: 'PETSTORE_WEBHOOK_ALLOW_HTTP',
    description:
      'Hosts webhook endpoints may be reached at with plain http:// (local receivers); every other endpoint must use https://. Checked at webhooks add and before each attempt.',
    format: 'host names or IP addresses, comma-separated',
    default: '',
    parse: listOf(isHost, 'must be host names or IP addresses (localhost, 127.0.0.1, ::1), comma-separated'),
  } satisfies Setting<string[]>,
  logLevel: {
    env: 'LOG_LEVEL',
    description: 'Least severe log level written (JSON lines on standard output).',
    format: `one of ${logLevels.join(', ')}`,
    default: 'info',
    parse: (raw) => {
      if (!(logLevels as readonly string[]).includes(raw)) throw new Error(`must be one of ${logLevels.join(', ')}`);
      return raw as (typeof logLevels)[number];
    },
  } satisfies Setting<(typeof logLevels)[number]>,
};

type Settings = typeof settings;
export type Config = Readonly<{ [K in keyof Settings]: ReturnType<Settings[K]['parse']> }> & {
  readonly sunsetSeconds: number;
};

/**
 * Reads the environment once into a frozen Config.
 * @throws ConfigError naming the variable, e.g. `PORT must be an integer from 0 to 65535 (got "http")`.
 */
export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const values: Record<string, unknown> = { sunsetSeconds: SUNSET_SECONDS };
  for (const [key, setting] of Object.entries(settings) as [string, Setting<unknown>][]) {
    const raw = env[setting.env] ?? (setting.derive ? setting.derive(values) : setting.default);
    if (raw === undefined) continue;
    try {
      values[key] = setting.parse(raw, env);
    } catch (error) {
      const shown = setting.show ? setting.show(raw) : raw;
      throw new ConfigError(`${setting.env} ${(error as Error).message} (got ${JSON.stringify(shown)})`);
    }
  }
  const config = values as Config;
  if (config.requestTimeoutMs < config.headersTimeoutMs) {
    throw new ConfigError(
      `PETSTORE_REQUEST_TIMEOUT_MS must be at least PETSTORE_HEADERS_TIMEOUT_MS (${config.headersTimeoutMs}) (got "${config.requestTimeoutMs}")`,
    );
  }
  if (config.spanBatchSize > config.spanQueueSize) {
    throw new ConfigError(
      `OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be at most OTEL_BSP_MAX_QUEUE_SIZE (${config.spanQueueSize}) (got "${config.spanBatchSize}")`,
    );
  }
  // docs/events.md#retention: an event deleted before it is given up would be dropped unsent.
  if (config.eventRetentionMs < config.webhookGiveUpMs) {
    const [retention, giveUp] = [settings.eventRetentionMs, settings.webhookGiveUpMs];
    throw new ConfigError(
      `PETSTORE_EVENT_RETENTION must be at least PETSTORE_WEBHOOK_GIVE_UP (${env[giveUp.env] ?? giveUp.default}), ` +
        `so that an event is kept while it may still be delivered (got "${env[retention.env] ?? retention.default}")`,
    );
  }
  if (config.databaseReadUrls.length > 0 && !config.databaseUrl) {
    throw new ConfigError('DATABASE_READ_URLS names replicas of DATABASE_URL, which is not set');
  }
  if (config.webhookLeaseMs <= config.webhookTimeoutMs) {
    throw new ConfigError(
      `PETSTORE_WEBHOOK_LEASE_MS must be more than PETSTORE_WEBHOOK_TIMEOUT_MS (${config.webhookTimeoutMs}) (got "${config.webhookLeaseMs}")`,
    );
  }
  return Object.freeze(config);
}

/**
 * The settings as a text table, for `--help`: every one (`petstore serve --help`) or those named.
 *
 * @example describeSettings(['sqlitePath', 'databaseUrl']) // the store settings alone
 */
export function describeSettings(
  names: (keyof typeof settings)[] = Object.keys(settings) as (keyof typeof settings)[],
): string {
  return names
    .map((name) => settings[name] as Setting<unknown>)
    .map(
      (s) =>
        `  ${s.env.padEnd(28)} ${s.description}\n  ${''.padEnd(28)} format: ${s.format}; default: ${s.default || '(none)'}`,
    )
    .join('\n');
}
