import { parseArgs } from 'node:util';
import { describeSettings, loadConfig } from '../config.js';
import { oneLine } from '../errors.js';
import { formatEventId, parseEventId } from '../events/ids.js';
import { makeSecret } from '../events/signature.js';
import { sendTestEvent, testEventId } from '../events/test-event.js';
import { refuseWebhookUrl } from '../events/url-policy.js';
import type { Store } from '../store/store.js';
import type { ReplayFrom, ResendRefusal, WebhookEndpointRecord } from '../store/webhooks.js';
import { noArguments, parseInstant, readGrace, runGroupCommand, UsageError, type Command } from './args.js';
import { isoOrNull, jsonLine, printRows, type Output } from './output.js';

export interface WebhooksDeps {
  io: Output;
  /** Opens and migrates the configured database, which must exist, runs `run` on it, and closes it. */
  withStore<T>(run: (store: Store) => Promise<T>): Promise<T>;
  /** PETSTORE_WEBHOOK_ALLOW_HTTP, read when `add` checks a URL and `test` sends. */
  allowHttp: () => readonly string[];
  /** PETSTORE_WEBHOOK_TIMEOUT_MS, read when `test` sends; the setting's default when absent. */
  timeoutMs?: () => number;
  /** The time endpoints are added and secrets rolled at. */
  now?: () => Date;
}

const storeSettings = describeSettings(['sqlitePath', 'databaseUrl', 'dbTimeoutMs']);
const exitCodes = 'Exit status: 0 done, 1 failed, 2 bad command line or setting.';
const refusedOrDone = 'Exit status: 0 done, 1 refused (see above), 2 bad command line or setting.';
const byId = 'Exit status: 0 done, 1 no endpoint has this id, 2 bad command line or setting.';

/** Help for each webhooks command, shown by `petstore webhooks <command> --help`. */
export const webhooksHelp: Record<string, string> = {
  webhooks: `Usage: petstore webhooks <add|list|remove|enable|roll|deliveries|test|resend|replay> [options]

  webhooks add <url> [--description <text>] [--json]
                                       Add an endpoint; its signing secret is printed once.
  webhooks list [--json]               List endpoints; never a secret.
  webhooks remove <id>                 Remove an endpoint and what it is still owed.
  webhooks enable <id>                 Enable an endpoint disabled after failing too long.
  webhooks roll <id> [--grace <duration>] [--json]
                                       Issue a new signing secret; both sign during the grace.
  webhooks deliveries <id> [--json] [--limit <n>]
                                       The endpoint's recent attempts, newest first.
  webhooks test <id> [--json]          Send the endpoint a signed test event now; print its answer.
  webhooks resend <id> <event-id>      Send one kept event to the endpoint again.
  webhooks replay <id> --since <event-id | instant>
                                       Send every kept event after that point again, oldest first.

Every created pet is announced as a pet.created event to each endpoint enabled when it was
created, signed as the Standard Webhooks specification says. See petstore webhooks <command>
--help, and docs/webhooks.md.
`,
  'webhooks add': `Usage: petstore webhooks add <url> [--description <text>] [--json]

Adds a webhook endpoint: from now on, every event created is POSTed to <url>, signed with the
endpoint's secret (docs/webhooks.md). Prints the endpoint's id and its signing secret
(whsec_ and base64) on standard output, the secret only this once: keep it where the receiver
can read it. The service stores it as it is, to sign with (the database is owner-only).

<url> must be https://, unless its host is listed in PETSTORE_WEBHOOK_ALLOW_HTTP (local
receivers); it holds no user name or password. Redirects are never followed. An http:// URL is
checked against this command's PETSTORE_WEBHOOK_ALLOW_HTTP: the service sends to it only if its
own setting lists the host too, and the command says so.

Options:
  --description <text>  What the endpoint is for, shown by webhooks list: at most 255
                        characters, no control character.
  --json                Print one JSON line instead:
                        {"id","url","description","secret","state","createdAt"}.

Example:
  npx petstore webhooks add https://search.example/hooks/petstore --description "search index"
  SECRET=$(npx petstore webhooks add https://shop.example/hook --json | jq -r .secret)

Settings (environment variables):
${storeSettings}
${describeSettings(['webhookAllowHttp'])}

${exitCodes}
`,
  'webhooks list': `Usage: petstore webhooks list [--json]

Lists every endpoint: id, URL, description, state (enabled, or disabled after failing every
attempt for PETSTORE_WEBHOOK_GIVE_UP), when it was created, its last success and last failure,
and the events it is owed and has not received. Never a secret.

Options:
  --json   One JSON line per endpoint: {"id","url","description","state","createdAt",
           "lastSuccessAt","lastFailureAt","waiting","disabledAt","previousSecretUntil"}.

Settings (environment variables):
${storeSettings}

${exitCodes}
`,
  'webhooks remove': `Usage: petstore webhooks remove <id>

Removes the endpoint with this id (see webhooks list), with the deliveries it is still owed and
its attempts. An attempt in flight at that moment may still arrive.

Settings (environment variables):
${storeSettings}

${byId}
`,
  'webhooks enable': `Usage: petstore webhooks enable <id>

Enables an endpoint that was disabled after failing every attempt for PETSTORE_WEBHOOK_GIVE_UP:
it receives the events created from now on, and its retries still waiting. Those created while
it was disabled are not sent: send them with webhooks replay <id> --since <when it failed>, or
read them from GET /v1/events.

Settings (environment variables):
${storeSettings}

${byId}
`,
  'webhooks roll': `Usage: petstore webhooks roll <id> [--grace <duration>] [--json]

Issues a new signing secret for the endpoint, printed once on standard output. Until the grace
ends, every delivery carries two signatures, one per secret (space-separated in
webhook-signature), so the receiver can switch to the new secret without missing a delivery;
then only the new secret signs. A roll during the grace of another replaces the older secret.

Options:
  --grace <duration>  How long the old secret still signs: 0 or a whole number and a unit, s,
                      m, h or d. Default: 24h.
  --json              Print one JSON line: {"id","secret","previousSecretUntil"}.

Settings (environment variables):
${storeSettings}

${byId}
`,
  'webhooks deliveries': `Usage: petstore webhooks deliveries <id> [--json] [--limit <n>]

Lists the endpoint's most recent attempts, newest first (the last 100 are kept): the event id,
the attempt number, when it started, the receiver's HTTP status or what went wrong, and how long
it took. Never a secret.

Options:
  --limit <n>  How many attempts, 1 to 100. Default: 20.
  --json       One JSON line per attempt: {"eventId","attempt","at","status","error","durationMs"}.

Settings (environment variables):
${storeSettings}

${byId}
`,
  'webhooks test': `Usage: petstore webhooks test <id> [--json]

Sends the endpoint one signed test event, now, from this command, and prints the receiver's
HTTP status and how long the attempt took. The event has the shape of every event, type
webhook.test and empty data: {"id":"evt_test_…","type":"webhook.test","createdAt":"…","data":{}}
(webhook-id is its id), signed with the endpoint's secret (and the old one during a roll's
grace). It is not in the feed, not retried and not listed by webhooks deliveries. The URL policy
and the timeout apply as they do to the service's attempts, read from this command's
environment. A disabled endpoint is sent the test too: try it before webhooks enable.

Options:
  --json   One JSON line: {"id","eventId","ok","status","error","durationMs"}; status is null
           when no answer came, error null on a 2xx.

Settings (environment variables):
${storeSettings}
${describeSettings(['webhookAllowHttp', 'webhookTimeoutMs'])}

Exit status: 0 the receiver answered 2xx, 1 it did not (or no endpoint has this id), 2 bad
command line or setting.
`,
  'webhooks resend': `Usage: petstore webhooks resend <id> <event-id>

Sends one kept event to the endpoint again, with the same webhook-id: the delivery is made due
now in the database, and the running service's relay sends it (any instance, on PostgreSQL),
retried like any delivery. An event already waiting for the endpoint is made due now, not
doubled; one being sent at this moment is left as it is. <event-id> is an event's id as the feed
(GET /v1/events) and webhooks deliveries show it, evt_ and 32 hexadecimal digits. Refused with
one line: no endpoint with this id, a disabled endpoint (enable it first), or an event that is
not kept (no event had that id, or it was deleted after PETSTORE_EVENT_RETENTION).

Settings (environment variables):
${storeSettings}

${refusedOrDone}
`,
  'webhooks replay': `Usage: petstore webhooks replay <id> --since <event-id | instant>

Sends the endpoint again every kept event after a point, oldest first: every event after
<event-id> (as GET /v1/events?after=<event-id> lists them), or every event created at or after
an RFC 3339 instant (2026-11-27T08:00:00Z). Each is made due now in the database, a thousand per
transaction, and the running service's relay sends them (any instance, on PostgreSQL), with the
same webhook-ids, retried like any delivery; an event already waiting for the endpoint is not
doubled. Prints on standard output how many events it made due. After an outage the endpoint
was disabled for: webhooks enable <id>, then replay since the outage began. Events deleted after
PETSTORE_EVENT_RETENTION are not kept, so not sent. Refused with one line: no endpoint with this
id, a disabled endpoint (enable it first), or an <event-id> that is not kept.

Options:
  --since <event-id | instant>   Where the replay starts: after this event, or at this instant.

Settings (environment variables):
${storeSettings}

${refusedOrDone}
`,
};

const DESCRIPTION_LIMIT = 255;
// The pet-name rule (docs/api.md#validation): no control character or lone surrogate.
const UNPRINTABLE = /[\p{Cc}\p{Cs}]/u;
const shown = (date: Date | null) => date?.toISOString() ?? '-';
const stateOf = (endpoint: WebhookEndpointRecord) => (endpoint.disabledAt ? 'disabled' : 'enabled');

function noSuchEndpoint(io: Output, id: number): number {
  io.err(`No webhook endpoint has id ${id}; see 'petstore webhooks list'.`);
  return 1;
}

function readId(positionals: string[], command: string, count = 1): number {
  const [text] = positionals;
  if (positionals.length !== count || text === undefined || !/^[1-9][0-9]{0,15}$/.test(text)) {
    throw new UsageError(
      `webhooks ${command} needs the one numeric id shown by webhooks list`,
      webhooksHelp[`webhooks ${command}`]!,
    );
  }
  return Number(text);
}

async function addCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const help = webhooksHelp['webhooks add']!;
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { description: { type: 'string' }, json: { type: 'boolean' } },
  });
  if (positionals.length !== 1) throw new UsageError('webhooks add needs one URL', help);
  const url = positionals[0]!;
  const refused = refuseWebhookUrl(url, deps.allowHttp());
  if (refused) throw new UsageError(`the URL is refused: ${refused}`, help);
  const description = values.description ?? '';
  if (description.length > DESCRIPTION_LIMIT || UNPRINTABLE.test(description)) {
    throw new UsageError(
      `--description must be at most ${DESCRIPTION_LIMIT} characters with no control character or lone surrogate`,
      help,
    );
  }
  const secret = makeSecret();
  const now = deps.now?.() ?? new Date();
  const endpoint = await deps.withStore((store) =>
    store.webhooks.addEndpoint({ url, description, secret, createdAt: now.getTime() }),
  );
  const { io } = deps;
  if (values.json) {
    io.out(
      jsonLine({
        id: endpoint.id,
        url: endpoint.url,
        description: endpoint.description,
        secret,
        state: stateOf(endpoint),
        createdAt: endpoint.createdAt.toISOString(),
      }),
    );
  } else {
    io.out(`id\t${endpoint.id}`);
    io.out(`secret\t${secret}`);
    io.err(
      `Added webhook endpoint ${endpoint.id} (${oneLine(endpoint.url)}): it receives every event created from now on. ` +
        'The secret is shown only this once: give it to the receiver to verify signatures.',
    );
  }
  // Allowed by this command's environment, which need not be the service's (docs/webhooks.md#url-policy).
  const { protocol, hostname } = new URL(url);
  if (protocol === 'http:') {
    io.err(
      `http:// is allowed for ${hostname} by this command's PETSTORE_WEBHOOK_ALLOW_HTTP: the service sends to it only ` +
        `if its own PETSTORE_WEBHOOK_ALLOW_HTTP lists ${hostname} too (else each attempt is refused and retried).`,
    );
  }
  return 0;
}

async function listCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
  noArguments(positionals, webhooksHelp['webhooks list']!);
  const endpoints = await deps.withStore((store) => store.webhooks.listEndpoints());
  printRows(deps.io, values.json, endpoints, {
    json: (e) => ({
      id: e.id,
      url: e.url,
      description: e.description,
      state: stateOf(e),
      createdAt: e.createdAt.toISOString(),
      lastSuccessAt: isoOrNull(e.lastSuccessAt),
      lastFailureAt: isoOrNull(e.lastFailureAt),
      waiting: e.waiting,
      disabledAt: isoOrNull(e.disabledAt),
      previousSecretUntil: isoOrNull(e.previousSecretUntil),
    }),
    header: ['ID', 'URL', 'DESCRIPTION', 'STATE', 'CREATED', 'LAST SUCCESS', 'LAST FAILURE', 'WAITING'],
    cells: (e) => [
      e.id,
      oneLine(e.url),
      oneLine(e.description) || '-',
      stateOf(e),
      e.createdAt.toISOString(),
      shown(e.lastSuccessAt),
      shown(e.lastFailureAt),
      e.waiting,
    ],
  });
  return 0;
}

async function removeCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, options: {} });
  const id = readId(positionals, 'remove');
  const removed = await deps.withStore((store) => store.webhooks.removeEndpoint(id));
  if (!removed) return noSuchEndpoint(deps.io, id);
  deps.io.err(`Removed webhook endpoint ${id}.`);
  return 0;
}

async function enableCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, options: {} });
  const id = readId(positionals, 'enable');
  const now = deps.now?.() ?? new Date();
  const outcome = await deps.withStore((store) => store.webhooks.enableEndpoint(id, now.getTime()));
  const { io } = deps;
  if (outcome === 'unknown') return noSuchEndpoint(io, id);
  io.err(
    outcome === 'enabled'
      ? `Enabled webhook endpoint ${id}: it receives the events created from now on, and its retries waiting.`
      : `Webhook endpoint ${id} is already enabled.`,
  );
  return 0;
}

async function rollCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const help = webhooksHelp['webhooks roll']!;
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { grace: { type: 'string' }, json: { type: 'boolean' } },
  });
  const id = readId(positionals, 'roll');
  const grace = readGrace(values.grace, help);
  const until = (deps.now?.() ?? new Date()).getTime() + grace;
  const secret = makeSecret();
  const rolled = await deps.withStore((store) => store.webhooks.rollSecret(id, secret, until));
  const { io } = deps;
  if (!rolled) return noSuchEndpoint(io, id);
  if (values.json) {
    io.out(jsonLine({ id, secret, previousSecretUntil: new Date(until).toISOString() }));
  } else {
    io.out(secret);
    io.err(
      `New signing secret for webhook endpoint ${id}, shown only this once. Deliveries carry a signature with ` +
        `the old secret too until ${new Date(until).toISOString()}.`,
    );
  }
  return 0;
}

async function deliveriesCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const help = webhooksHelp['webhooks deliveries']!;
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: { json: { type: 'boolean' }, limit: { type: 'string' } },
  });
  const id = readId(positionals, 'deliveries');
  const limitText = values.limit ?? '20';
  if (!/^[1-9][0-9]{0,2}$/.test(limitText) || Number(limitText) > 100) {
    throw new UsageError(`--limit must be an integer from 1 to 100 (got "${oneLine(limitText)}")`, help);
  }
  const attempts = await deps.withStore((store) => store.webhooks.listAttempts(id, Number(limitText)));
  if (!attempts) return noSuchEndpoint(deps.io, id);
  printRows(deps.io, values.json, attempts, {
    json: (a) => ({
      eventId: a.eventId,
      attempt: a.attempt,
      at: a.at.toISOString(),
      status: a.status,
      error: a.error,
      durationMs: a.durationMs,
    }),
    header: ['EVENT', 'ATTEMPT', 'AT', 'RESULT', 'DURATION'],
    cells: (a) => [
      a.eventId,
      a.attempt,
      a.at.toISOString(),
      a.error === null ? `HTTP ${a.status}` : oneLine(a.error),
      `${a.durationMs} ms`,
    ],
  });
  return 0;
}

async function testCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
  const id = readId(positionals, 'test');
  const at = deps.now?.() ?? new Date();
  const target = await deps.withStore((store) => store.webhooks.signingTarget(id, at.getTime()));
  const { io } = deps;
  if (!target) return noSuchEndpoint(io, id);
  const eventId = testEventId();
  const timeoutMs = deps.timeoutMs?.() ?? loadConfig({}).webhookTimeoutMs;
  const sent = await sendTestEvent(target, { id: eventId, at, allowHttp: deps.allowHttp(), timeoutMs });
  if (values.json) {
    const { ok, status, error, durationMs } = sent;
    io.out(jsonLine({ id, eventId, ok, status, error, durationMs }));
  } else {
    io.out(`${sent.ok ? `HTTP ${sent.status}` : `failed: ${oneLine(sent.error ?? '')}`} in ${sent.durationMs} ms`);
    io.err(
      `Sent a webhook.test event (${eventId}) to webhook endpoint ${id}${target.disabled ? ', which is disabled' : ''}: ` +
        (sent.ok ? 'the receiver accepted it.' : 'the receiver did not accept it.'),
    );
  }
  return sent.ok ? 0 : 1;
}

/** `<event-id>`, an event's id as the feed shows it: a position; a bad one is a UsageError. */
function readEventId(text: string | undefined, what: string, help: string) {
  const position = text === undefined ? undefined : parseEventId(text);
  if (!position) {
    throw new UsageError(
      `${what} must be an event id, evt_ and 32 hexadecimal digits, as GET /v1/events and webhooks deliveries show it` +
        (text === undefined ? '' : ` (got "${text}")`),
      help,
    );
  }
  return position;
}

/** The line a refused resend or replay prints; its exit status is 1. */
function refusal(io: Output, id: number, refused: ResendRefusal, event?: string): number {
  switch (refused.kind) {
    case 'unknown_endpoint':
      return noSuchEndpoint(io, id);
    case 'disabled':
      io.err(
        `Webhook endpoint ${id} is disabled: enable it first ('petstore webhooks enable ${id}'); nothing was sent.`,
      );
      return 1;
    case 'unknown_event':
      io.err(`No event has id ${event}; nothing was sent (GET /v1/events lists the events kept).`);
      return 1;
    case 'expired_event':
      io.err(`Event ${event} is no longer kept: it was deleted after PETSTORE_EVENT_RETENTION; nothing was sent.`);
      return 1;
  }
}

async function resendCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const help = webhooksHelp['webhooks resend']!;
  const { positionals } = parseArgs({ args, allowPositionals: true, options: {} });
  const id = readId(positionals, 'resend', 2);
  const position = readEventId(positionals[1], '<event-id>', help);
  const event = formatEventId(position);
  const now = (deps.now?.() ?? new Date()).getTime();
  const outcome = await deps.withStore((store) => store.webhooks.resend(id, position, now));
  const { io } = deps;
  if (outcome.kind !== 'due') return refusal(io, id, outcome, event);
  const done = {
    none: `Event ${event} is due again for webhook endpoint ${id}: the service's relay sends it, with the same webhook-id.`,
    waiting: `Event ${event} was waiting for webhook endpoint ${id} (a retry); it is due now, and the service's relay sends it.`,
    in_flight: `Event ${event} is being sent to webhook endpoint ${id} at this moment; it was left as it is.`,
  };
  io.err(done[outcome.before]);
  return 0;
}

/** `--since`: an RFC 3339 instant, or an event id; a bad one (or none) is a UsageError. */
function readSince(text: string | undefined, help: string): ReplayFrom {
  if (text === undefined) throw new UsageError('webhooks replay needs --since <event-id | instant>', help);
  const instant = parseInstant(text);
  if (instant) return { since: instant };
  const after = parseEventId(text);
  if (after) return { after };
  throw new UsageError(
    '--since must be an event id (evt_ and 32 hexadecimal digits, as GET /v1/events shows it) or an RFC 3339 ' +
      `instant like 2026-11-27T08:00:00Z (got "${text}")`,
    help,
  );
}

async function replayCommand(deps: WebhooksDeps, args: string[]): Promise<number> {
  const help = webhooksHelp['webhooks replay']!;
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { since: { type: 'string' } } });
  const id = readId(positionals, 'replay');
  const from = readSince(values.since, help);
  const now = (deps.now?.() ?? new Date()).getTime();
  const outcome = await deps.withStore((store) => store.webhooks.replay(id, from, now));
  const { io } = deps;
  if (outcome.kind !== 'replayed') return refusal(io, id, outcome, values.since);
  io.out(String(outcome.due));
  const point = 'since' in from ? `created since ${from.since.toISOString()}` : `after ${values.since}`;
  const waiting =
    outcome.waiting > 0
      ? `; ${outcome.waiting} more ${outcome.waiting === 1 ? 'was' : 'were'} already waiting for it`
      : '';
  io.err(
    `Made ${outcome.due} kept event${outcome.due === 1 ? '' : 's'} ${point} due again for webhook endpoint ${id}${waiting}. ` +
      "The service's relay sends them, oldest first.",
  );
  return 0;
}

const commands: Record<string, Command<WebhooksDeps>> = {
  add: addCommand,
  list: listCommand,
  remove: removeCommand,
  enable: enableCommand,
  roll: rollCommand,
  deliveries: deliveriesCommand,
  test: testCommand,
  resend: resendCommand,
  replay: replayCommand,
};

/**
 * `petstore webhooks <command> …`: parses its own arguments, runs it, and resolves to the exit
 * status. A bad command line prints the command's usage and is 2, having changed nothing.
 *
 * @example
 * process.exitCode = await runWebhooksCommand(['list', '--json'], { io, withStore, allowHttp: () => [] });
 */
export function runWebhooksCommand(args: string[], deps: WebhooksDeps): Promise<number> {
  return runGroupCommand('webhooks', args, deps, { commands, help: webhooksHelp });
}
