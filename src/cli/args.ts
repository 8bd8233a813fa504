import { oneLine } from '../errors.js';
import type { Output } from './output.js';

/**
 * A command line a command cannot run: the message, and the usage to show with it (the runner's
 * own when none is given). The one such error of every command (main.ts, keys, webhooks, database).
 */
export class UsageError extends Error {
  constructor(
    message: string,
    readonly help?: string,
  ) {
    super(message);
  }
}

/** Refuses arguments that are not options, for a command that takes none. */
export function noArguments(positionals: string[], help: string): void {
  if (positionals.length > 0) throw new UsageError(`unexpected argument: ${positionals.join(' ')}`, help);
}

const UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 };

/** `90d`, `12h`, `30m`, `45s` in ms; `0` too when `zero` allows it; undefined when malformed. */
export function parseDuration(text: string, { zero = false } = {}): number | undefined {
  if (zero && /^0+[smhd]?$/.test(text)) return 0;
  const match = /^([1-9][0-9]{0,6})([smhd])$/.exec(text);
  return match ? Number(match[1]) * UNIT_MS[match[2]!]! : undefined;
}

/** `--grace` as a roll reads it, in ms: 0 or a duration; 24h when it is not given. */
export function readGrace(text: string | undefined, help: string): number {
  const given = text ?? '24h';
  const grace = parseDuration(given, { zero: true });
  if (grace === undefined) {
    throw new UsageError(
      `--grace must be 0 or a whole number and a unit, s, m, h or d, like 24h (got "${given}")`,
      help,
    );
  }
  return grace;
}

/** An RFC 3339 date-time (`2027-03-01T00:00:00Z`, `…T01:00:00.5+01:00`) as a Date; undefined when malformed. */
export function parseInstant(text: string): Date | undefined {
  const match =
    /^([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$/.exec(
      text,
    );
  if (!match) return undefined;
  const [year, month, day, hour, minute, second] = match.slice(1, 7).map(Number) as [
    number,
    number,
    number,
    number,
    number,
    number,
  ];
  const fields = new Date(Date.UTC(year, month - 1, day, hour, minute, second));
  const valid =
    fields.getUTCFullYear() === year &&
    fields.getUTCMonth() === month - 1 &&
    fields.getUTCDate() === day &&
    hour < 24 &&
    minute < 60 &&
    second < 60;
  const offset = match[8]!;
  if (!valid || (offset.length > 1 && (Number(offset.slice(1, 3)) > 23 || Number(offset.slice(4)) > 59))) {
    return undefined;
  }
  const instant = new Date(text.toUpperCase());
  return Number.isNaN(instant.getTime()) ? undefined : instant;
}

/** A command of a group (`keys create`): its dependencies and the arguments after its name. */
export type Command<Deps> = (deps: Deps, args: string[]) => Promise<number>;

/**
 * `petstore <group> <command> …` (`keys`, `webhooks`): runs the command and resolves to its exit
 * status. `--help` prints the command's usage (the group's for no or an unknown command); a bad
 * command line prints its message, on one line, and the usage, and is 2, having changed nothing.
 */
export async function runGroupCommand<Deps extends { io: Output }>(
  group: string,
  args: string[],
  deps: Deps,
  { commands, help }: { commands: Record<string, Command<Deps>>; help: Record<string, string> },
): Promise<number> {
  const [command, ...rest] = args;
  // Own names only: `keys toString` is an unknown command, not Object.prototype's.
  const run = command !== undefined && Object.hasOwn(commands, command) ? commands[command] : undefined;
  const usage = (run && help[`${group} ${command}`]) || help[group]!;
  try {
    if (args.includes('--help') || args.includes('-h')) {
      deps.io.out(usage);
      return 0;
    }
    if (!run) {
      throw new UsageError(
        command ? `unknown command: ${group} ${args.join(' ')}` : `no ${group} command given`,
        usage,
      );
    }
    try {
      return await run(deps, rest);
    } catch (error) {
      const code = (error as { code?: unknown }).code;
      if (typeof code === 'string' && code.startsWith('ERR_PARSE_ARGS'))
        throw new UsageError((error as Error).message, usage);
      throw error;
    }
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    // One line, whatever the command line held (unknown scope "…", unexpected argument …).
    deps.io.err(`petstore: ${oneLine(error.message)}\n\n${error.help ?? usage}`);
    return 2;
  }
}
