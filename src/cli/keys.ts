import { parseArgs } from 'node:util';
import { describeSettings } from '../config.js';
import { oneLine } from '../errors.js';
import { isScope, Name, scopes as allScopes, type Scope } from '../schemas.js';
import type { KeyRecord, Store } from '../store/store.js';
import { issueKey } from '../keys/issue.js';
import { hashKey, keyHint, makeKey } from '../keys/keys.js';
import {
  noArguments,
  parseDuration,
  parseInstant,
  readGrace,
  runGroupCommand,
  UsageError,
  type Command,
} from './args.js';
import { isoOrNull, jsonLine, printRows, type Output } from './output.js';

export interface KeysDeps {
  io: Output;
  /** Opens and migrates the configured database, which must exist, runs `run` on it, and closes it. */
  withStore<T>(run: (store: Store) => Promise<T>): Promise<T>;
  /** The time keys are issued, rolled and judged at. */
  now?: () => Date;
}

const storeSettings = describeSettings(['sqlitePath', 'databaseUrl', 'dbTimeoutMs']);
const exitCodes = 'Exit status: 0 done, 1 failed, 2 bad command line or setting.';
const scopeList = allScopes.join(', ');

/** Help for each keys command, shown by `petstore keys <command> --help` and `petstore help keys <command>`. */
export const keysHelp: Record<string, string> = {
  keys: `Usage: petstore keys <create|list|revoke|roll> [options]

  keys create --name <name> [--scope <scope>]... [--expires-in <duration>] [--json]
                                       Issue an API key, printed once.
  keys list [--json]                   List keys; never a secret.
  keys revoke <id>                     Revoke a key.
  keys roll <id> [--grace <duration>]  Issue a successor; the old key expires after the grace.

See petstore keys <command> --help, and docs/keys.md.
`,
  'keys create': `Usage: petstore keys create --name <name> [--scope <scope>]... [--expires-in <duration> | --expires-at <instant>] [--json]

Issues an API key. The key goes to standard output and nowhere else, exactly once: the service
keeps only its hash. A note for people goes to standard error. The database must exist (the
service's, named by PETSTORE_DB or DATABASE_URL as the service has them): a missing SQLite file
is refused, not created.

Options:
  --name <name>            What the key is for, shown by keys list: 1 to 255 characters, kept
                           as given, not only white space, no control character.
  --scope <scope>          What it may do, repeatable: pets:read (listPets, getPet), pets:write
                           (createPet), metrics:read (GET /metrics), events:read (listEvents).
                           Default: pets:read, pets:write and metrics:read; events:read only
                           when asked for.
  --expires-in <duration>  Refused from that long after now: a positive whole number and a unit,
                           s, m, h or d (90d, 12h). Default: never.
  --expires-at <instant>   Refused from that RFC 3339 instant on (2027-03-01T00:00:00Z).
  --json                   Print one JSON line instead:
                           {"id","name","key","scopes","createdAt","expiresAt"}.

Example:
  KEY=$(npx petstore keys create --name ci)
  npx petstore keys create --name dashboard --scope pets:read --expires-in 90d
  npx petstore keys create --name prometheus --scope metrics:read --json | jq -r .key

Settings (environment variables):
${storeSettings}

${exitCodes}
`,
  'keys list': `Usage: petstore keys list [--json]

Lists every key: id, name, its first characters, scopes, when it was created, when it expires,
its state (active, expired, revoked), when a request last used it and when one last called a
deprecated operation with it (getPet, removed 2030-12-05), to the minute (each instance writes
them at most once a minute). Never a key. A name's control characters, line separators and
bidirectional controls are shown by their code point (U+001B), so no name can drive the terminal.

Options:
  --json          One JSON line per key: {"id","name","hint","scopes","createdAt","expiresAt",
                  "state","lastUsedAt","lastDeprecatedUseAt","revokedAt","replacedBy"}.

Settings (environment variables):
${storeSettings}

${exitCodes}
`,
  'keys revoke': `Usage: petstore keys revoke <id>

Revokes the key with this id (see keys list). Every instance refuses it within one second.

Settings (environment variables):
${storeSettings}

Exit status: 0 revoked, 1 no active key has this id, 2 bad command line or setting.
`,
  'keys roll': `Usage: petstore keys roll <id> [--grace <duration>] [--expires-in <duration> | --expires-at <instant>] [--json]

Issues a successor to the key with this id: the same name and scopes, printed once like keys
create. The old key keeps working for the grace period, on every instance, then expires, so
clients switch to the successor without downtime. A key can be rolled once: roll its successor
next time. A revoked or expired key cannot be rolled.

Options:
  --grace <duration>       How long the old key keeps working: 0 (it expires at once) or a
                           whole number and a unit, s, m, h or d. Default: 24h.
  --expires-in <duration>  The successor's lifetime. Default: the old key's lifetime (created
                           to expires), or never when it had no expiry.
  --expires-at <instant>   The successor's expiry as an RFC 3339 instant.
  --json                   Print one JSON line: {"id","name","key","scopes","createdAt",
                           "expiresAt","replaces","replacedExpiresAt"}.

Example:
  npx petstore keys roll 3 --grace 1h

Settings (environment variables):
${storeSettings}

Exit status: 0 rolled, 1 no such key, or it is revoked, expired or already rolled, 2 bad
command line or setting.
`,
};

// ISO 8601 text past year 9999 no longer sorts as time does (SQLite compares it as text).
const LATEST = Date.UTC(9999, 11, 31, 23, 59, 59);

const expiryOptions = { 'expires-in': { type: 'string' }, 'expires-at': { type: 'string' } } as const;

interface Expiry {
  'expires-in'?: string;
  'expires-at'?: string;
}

/** The expiry `--expires-in` or `--expires-at` asks for: a Date, or undefined when neither is given. */
function readExpiry(values: Expiry, now: Date, help: string): Date | undefined {
  const { 'expires-in': within, 'expires-at': at } = values;
  if (within !== undefined && at !== undefined)
    throw new UsageError('give --expires-in or --expires-at, not both', help);
  let expiresAt: Date | undefined;
  if (within !== undefined) {
    const ms = parseDuration(within);
    if (ms === undefined) {
      throw new UsageError(
        `--expires-in must be a positive whole number and a unit, s, m, h or d, like 90d (got "${within}")`,
        help,
      );
    }
    expiresAt = new Date(now.getTime() + ms);
  }
  if (at !== undefined) {
    expiresAt = parseInstant(at);
    if (!expiresAt)
      throw new UsageError(`--expires-at must be an RFC 3339 instant like 2027-03-01T00:00:00Z (got "${at}")`, help);
    if (expiresAt <= now) throw new UsageError(`--expires-at ${at} is not in the future`, help);
  }
  if (expiresAt && expiresAt.getTime() > LATEST) throw new UsageError('the expiry must be before the year 10000', help);
  return expiresAt;
}

function readScopes(words: string[] | undefined, help: string): Scope[] | undefined {
  if (!words) return undefined;
  for (const word of words) {
    if (!isScope(word)) throw new UsageError(`unknown scope "${word}"; the scopes are ${scopeList}`, help);
  }
  return allScopes.filter((scope) => words.includes(scope));
}

function readId(text: string | undefined, command: string): number {
  if (text === undefined || !/^[1-9][0-9]{0,8}$/.test(text)) {
    throw new UsageError(`keys ${command} needs the numeric id shown by keys list`, keysHelp[`keys ${command}`]!);
  }
  return Number(text);
}

const NAME_RULE = new RegExp(Name.pattern!, 'u');

/**
 * Why `name` breaks the name rule pets and keys share (schemas.ts Name), the character at fault
 * by its code point; undefined when it keeps the rule.
 *
 * @example nameFault('a\u001b[2K') // 'it holds U+001B (character 2)'
 */
export function nameFault(name: string): string | undefined {
  const characters = [...name];
  if (characters.length < Name.minLength! || characters.length > Name.maxLength!) {
    return `it has ${characters.length} characters`;
  }
  if (NAME_RULE.test(name)) return undefined;
  const at = characters.findIndex((c) => /^[\p{Cc}\p{Cs}]$/u.test(c));
  return at < 0 ? 'it is only white space' : `it holds ${oneLine(characters[at]!)} (character ${at + 1})`;
}

/**
 * A name as a terminal may show it: a control character, a line separator, a bidirectional
 * control or a lone surrogate by its code point (U+001B), as error messages show them
 * (docs/keys.md#listing-keys). A database written before the name rule may hold any of them.
 */
const shownName = (name: string) => oneLine(name);

// docs/keys.md#listing-keys: last use to the minute.
const toMinute = (date: Date) => new Date(date.getTime() - (date.getTime() % 60_000)).toISOString();
const shownMinute = (date: Date | null) => (date ? toMinute(date).slice(0, 16) + 'Z' : '-');

function keyState(key: KeyRecord, now: Date): 'active' | 'expired' | 'revoked' {
  if (key.revokedAt) return 'revoked';
  return key.expiresAt && key.expiresAt <= now ? 'expired' : 'active';
}

function issuedNote(record: KeyRecord): string {
  const expires = record.expiresAt ? `, expires ${record.expiresAt.toISOString()}` : '';
  return `key ${record.id} (${shownName(record.name)}; ${record.scopes.join(' ')}${expires})`;
}

async function createKeyCommand(deps: KeysDeps, args: string[]): Promise<number> {
  const help = keysHelp['keys create']!;
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      name: { type: 'string' },
      scope: { type: 'string', multiple: true },
      ...expiryOptions,
      json: { type: 'boolean' },
    },
  });
  noArguments(positionals, help);
  const name = values.name;
  if (name === undefined) throw new UsageError('keys create needs --name', help);
  const fault = nameFault(name);
  if (fault !== undefined) {
    throw new UsageError(
      `--name must be 1 to 255 characters, not only white space, with no control character or lone surrogate; ${fault}`,
      help,
    );
  }
  const scopes = readScopes(values.scope, help);
  const now = deps.now?.() ?? new Date();
  const expiresAt = readExpiry(values, now, help) ?? null;
  const { key, record } = await deps.withStore((store) => issueKey(store, name, now, { scopes, expiresAt }));
  const { io } = deps;
  if (values.json) {
    const { id, scopes: held, createdAt } = record;
    io.out(jsonLine({ id, name: record.name, key, scopes: held, createdAt, expiresAt: isoOrNull(record.expiresAt) }));
  } else {
    io.out(key);
    io.err(`Created ${issuedNote(record)}. It is shown only this once: keep it somewhere safe.`);
  }
  return 0;
}

async function listKeysCommand(deps: KeysDeps, args: string[]): Promise<number> {
  const { values, positionals } = parseArgs({ args, allowPositionals: true, options: { json: { type: 'boolean' } } });
  noArguments(positionals, keysHelp['keys list']!);
  const keys = await deps.withStore((store) => store.listKeys());
  const now = deps.now?.() ?? new Date();
  printRows(deps.io, values.json, keys, {
    json: (k) => ({
      id: k.id,
      name: k.name,
      hint: k.hint,
      scopes: k.scopes,
      createdAt: k.createdAt.toISOString(),
      expiresAt: isoOrNull(k.expiresAt),
      state: keyState(k, now),
      lastUsedAt: k.lastUsedAt && toMinute(k.lastUsedAt),
      lastDeprecatedUseAt: k.lastDeprecatedUseAt && toMinute(k.lastDeprecatedUseAt),
      revokedAt: isoOrNull(k.revokedAt),
      replacedBy: k.replacedBy,
    }),
    header: ['ID', 'NAME', 'KEY', 'SCOPES', 'CREATED', 'EXPIRES', 'STATE', 'LAST USED', 'LAST DEPRECATED USE'],
    cells: (k) => {
      const state = keyState(k, now);
      return [
        k.id,
        shownName(k.name),
        k.hint,
        k.scopes.join(','),
        k.createdAt.toISOString(),
        k.expiresAt?.toISOString() ?? '-',
        k.replacedBy !== null && state === 'active' ? `active (replaced by ${k.replacedBy})` : state,
        shownMinute(k.lastUsedAt),
        shownMinute(k.lastDeprecatedUseAt),
      ];
    },
  });
  return 0;
}

async function revokeKeyCommand(deps: KeysDeps, args: string[]): Promise<number> {
  const { positionals } = parseArgs({ args, allowPositionals: true, options: {} });
  if (positionals.length !== 1) throw new UsageError('keys revoke needs one id', keysHelp['keys revoke']!);
  const id = readId(positionals[0], 'revoke');
  const revoked = await deps.withStore((store) => store.revokeKey(id, deps.now?.() ?? new Date()));
  if (revoked) deps.io.err(`Revoked key ${id}. Every instance refuses it within one second.`);
  else deps.io.err(`No active key has id ${id}; see 'petstore keys list'.`);
  return revoked ? 0 : 1;
}

async function rollKeyCommand(deps: KeysDeps, args: string[]): Promise<number> {
  const help = keysHelp['keys roll']!;
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      grace: { type: 'string' },
      ...expiryOptions,
      json: { type: 'boolean' },
    },
  });
  if (positionals.length !== 1) throw new UsageError('keys roll needs one id', help);
  const id = readId(positionals[0], 'roll');
  const grace = readGrace(values.grace, help);
  const now = deps.now?.() ?? new Date();
  if (now.getTime() + grace > LATEST) throw new UsageError('the grace must end before the year 10000', help);
  const asked = readExpiry(values, now, help);
  const key = makeKey();
  const outcome = await deps.withStore(async (store) => {
    const old = (await store.listKeys()).find((k) => k.id === id);
    // By default the successor lives as long as the old key was issued to.
    const lifetime = old?.expiresAt ? old.expiresAt.getTime() - old.createdAt.getTime() : undefined;
    const expiresAt = asked ?? (lifetime === undefined ? null : new Date(Math.min(now.getTime() + lifetime, LATEST)));
    return store.rollKey({
      id,
      successor: { hint: keyHint(key), hash: hashKey(key), createdAt: now, expiresAt },
      oldExpiresAt: new Date(now.getTime() + grace),
      at: now,
    });
  });
  const { io } = deps;
  switch (outcome.kind) {
    case 'unknown':
      io.err(`No key has id ${id}; see 'petstore keys list'.`);
      return 1;
    case 'revoked':
      io.err(`Key ${id} is revoked and cannot be rolled; issue a new key with 'petstore keys create'.`);
      return 1;
    case 'expired':
      io.err(`Key ${id} has expired and cannot be rolled; issue a new key with 'petstore keys create'.`);
      return 1;
    case 'replaced':
      io.err(`Key ${id} was already rolled: key ${outcome.by} replaces it. Roll key ${outcome.by} instead.`);
      return 1;
  }
  const { old, successor } = outcome;
  if (values.json) {
    io.out(
      jsonLine({
        id: successor.id,
        name: successor.name,
        key,
        scopes: successor.scopes,
        createdAt: successor.createdAt.toISOString(),
        expiresAt: isoOrNull(successor.expiresAt),
        replaces: old.id,
        replacedExpiresAt: isoOrNull(old.expiresAt),
      }),
    );
  } else {
    io.out(key);
    io.err(
      `Created ${issuedNote(successor)} to replace key ${old.id}. It is shown only this once: keep it somewhere safe.\n` +
        `Key ${old.id} works until ${old.expiresAt!.toISOString()}; every instance refuses it from then on.`,
    );
  }
  return 0;
}

const commands: Record<string, Command<KeysDeps>> = {
  create: createKeyCommand,
  list: listKeysCommand,
  revoke: revokeKeyCommand,
  roll: rollKeyCommand,
};

/**
 * `petstore keys <command> …`: parses its own arguments, runs it, and resolves to the exit
 * status. A bad command line prints the command's usage and is 2, having changed nothing.
 *
 * @example
 * process.exitCode = await runKeysCommand(['roll', '3', '--grace', '1h'], { io, withStore });
 */
export function runKeysCommand(args: string[], deps: KeysDeps): Promise<number> {
  return runGroupCommand('keys', args, deps, { commands, help: keysHelp });
}
