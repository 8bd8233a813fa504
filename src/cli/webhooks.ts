import { parseArgs } from 'node:util';
import { describeSettings } from '../config.js';
import { oneLine } from '../errors.js';
import { makeSecret } from '../events/signature.js';
import { refuseWebhookUrl } from '../events/url-policy.js';
import type { Store } from '../store/store.js';
import type { WebhookEndpointRecord } from '../store/webhooks.js';
import { noArguments, readGrace, runGroupCommand, UsageError, type Command } from './args.js';
import { isoOrNull, jsonLine, printRows, type Output } from './output.js';

export interface WebhooksDeps {
  io: Output;
  /** Opens and migrates the configured database, which must exist, runs `run` on it, and closes it. */
  withStore<T>(run: (store: Store) => Promise<T>): Promise<T>;
  /** PETSTORE_WEBHOOK_ALLOW_HTTP, read when `add` checks a URL. */
  allowHttp: () => readonly string[];
  /** The time endpoints are added and secrets rolled at. */
  now?: () => Date;
}

const storeSettings = describeSettings(['sqlitePath', 'databaseUrl', 'dbTimeoutMs']);
const exitCodes = 'Exit status: 0 done, 1 failed, 2 bad command line or setting.';
const byId = 'Exit status: 0 done, 1 no endpoint has this id, 2 bad command line or setting.';

/** Help for each webhooks command, shown by `petstore webhooks <command> --help`. */
export const webhooksHelp: Record<string, string> = {
  webhooks: `Usage: petstore webhooks <add|list|remove|enable|roll|deliveries> [options]

  webhooks add <url> [--description <text>] [--json]
                                       Add an endpoint; its signing secret is printed once.
  webhooks list [--json]               List endpoints; never a secret.
  webhooks remove <id>                 Remove an endpoint and what it is still owed.
  webhooks enable <id>                 Enable an endpoint disabled after failing too long.
  webhooks roll <id> [--grace <duration>] [--json]
                                       Issue a new signing secret; both sign during the grace.
  webhooks deliveries <id> [--json] [--limit <n>]
                                       The endpoint's recent attempts, newest first.

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
receivers); it holds no user name or password. Redirects are never followed.

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
it receives the events created from now on (those created while it was disabled are not sent;
read them from GET /v1/events), and its retries still waiting.

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

function readId(positionals: string[], command: string): number {
  const [text] = positionals;
  if (positionals.length !== 1 || text === undefined || !/^[1-9][0-9]{0,15}$/.test(text)) {
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

const commands: Record<string, Command<WebhooksDeps>> = {
  add: addCommand,
  list: listCommand,
  remove: removeCommand,
  enable: enableCommand,
  roll: rollCommand,
  deliveries: deliveriesCommand,
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
