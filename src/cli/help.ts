import { describeSettings } from '../config.js';
import { databaseHelp } from './database.js';
import { keysHelp } from './keys.js';
import { webhooksHelp } from './webhooks.js';

/** The petstore command's own usage: what `petstore --help` prints. */
export const usage = `Usage: petstore <command> [options]
       (npx petstore <command> in the installation folder)

Commands:
  serve                          Migrate the database (creating it when missing) and serve the API.
  migrate                        Create the database when missing, apply its migrations and exit.
  keys create --name <name>      Issue an API key; the key is printed once, on standard output.
         [--scope <scope>]...    pets:read, pets:write, metrics:read (the default), events:read.
         [--expires-in <90d>]    Or --expires-at <RFC 3339 instant>; by default it never expires.
         [--json]                Print {"id","name","key","scopes","createdAt","expiresAt"} as one JSON line.
  keys list [--json]             List keys (id, name, scopes, created, expires, state, last used); never a secret.
  keys revoke <id>               Revoke a key; every instance refuses it within one second.
  keys roll <id> [--grace 24h]   Issue a successor; the old key works until the grace ends.
  webhooks add <url>             Add a webhook endpoint; its signing secret is printed once.
         [--description <text>] [--json]
  webhooks list [--json]         List endpoints (state, last success and failure, events waiting).
  webhooks remove <id>           Remove an endpoint.
  webhooks enable <id>           Enable an endpoint disabled after failing for the give-up period.
  webhooks roll <id> [--grace 24h]
                                 Issue a new signing secret; the old one also signs until the grace ends.
  webhooks deliveries <id> [--json]
                                 An endpoint's recent attempts (event, attempt, when, status or error).
  webhooks test <id> [--json]    Send the endpoint a signed webhook.test event now; print its status and time.
  webhooks resend <id> <event-id>
                                 Send one kept event to the endpoint again (same webhook-id).
  webhooks replay <id> --since <event-id | RFC 3339 instant>
                                 Send every kept event after that point again, oldest first; print how many.
  migrate status [--json]        List migrations: applied (with when), pending, or unknown to this version.
  backup <file> [--force]        Write a consistent copy of the SQLite database, even while it serves.
  restore <file>                 Check a copy and put it in place of the SQLite database (service stopped).

Options:
  -h, --help                     Show this help, or a command's: petstore keys create --help.
  --version                      Show the version of petstore and of Node.js running it.

Settings (environment variables):
${describeSettings()}
`;

/** Help for each command, shown by `petstore <command> --help` and `petstore help <command>`. */
const commandHelp: Record<string, string> = {
  serve: `Usage: petstore serve

Applies pending database migrations (one line each on standard error), issues a first API key
when the database has none (printed once, on standard error), then serves the API. Logs are JSON
lines on standard output. SIGTERM or SIGINT stops accepting, lets in-flight requests finish
(10 s at most), closes the database and exits 0.

Settings (environment variables):
${describeSettings()}
`,
  ...keysHelp,
  ...webhooksHelp,
  ...databaseHelp,
};

/** The help a command line asks for: `<command> --help`, `help <command>`, or none. */
export function askedHelp(positionals: string[], help: boolean): string | undefined {
  const words = positionals[0] === 'help' ? positionals.slice(1) : help ? positionals : undefined;
  if (!words) return undefined;
  for (let n = Math.min(words.length, 2); n > 0; n--) {
    const name = words.slice(0, n).join(' ');
    // Own names only: `petstore toString` is an unknown command, not Object.prototype's.
    if (Object.hasOwn(commandHelp, name)) return commandHelp[name];
  }
  return usage;
}
