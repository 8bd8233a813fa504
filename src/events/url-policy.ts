import { isIP } from 'node:net';

const LONGEST = 2048;
// Controls and white space: a URL parser drops some of them silently (tabs, line breaks), so the
// URL used would not be the one shown.
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNSAFE = /[\u0000-\u0020\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

/** A host as a URL's `hostname` writes it: lower case, an IPv6 address in brackets, IPv4 normalised. */
function hostOf(entry: string): string | undefined {
  const bare = entry.replace(/^\[(.*)\]$/, '$1');
  try {
    return new URL(`http://${isIP(bare) === 6 ? `[${bare}]` : bare}/`).hostname;
  } catch {
    return undefined;
  }
}

/**
 * Why a webhook endpoint may not be sent to at `text`, or undefined when it may
 * (docs/webhooks.md#url-policy): `https://` only, unless its host is one of `allowHttp`
 * (PETSTORE_WEBHOOK_ALLOW_HTTP); no user name or password. Checked at `webhooks add` and before
 * each attempt, so narrowing the setting takes effect at once.
 *
 * @example refuseWebhookUrl('http://example.com/hook', []) // 'only https:// URLs …'
 */
export function refuseWebhookUrl(text: string, allowHttp: readonly string[]): string | undefined {
  if (text.length > LONGEST) return `the URL is longer than ${LONGEST} characters`;
  if (UNSAFE.test(text)) return 'the URL holds a space or a control character';
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return 'not an absolute URL (https://host/path)';
  }
  if (url.username !== '' || url.password !== '') return 'the URL must not hold a user name or password';
  if (url.protocol === 'https:') return undefined;
  if (url.protocol !== 'http:') return `only https:// URLs are allowed (got ${url.protocol}//)`;
  const allowed = allowHttp.map(hostOf);
  if (allowed.includes(url.hostname)) return undefined;
  return `only https:// URLs are allowed; http:// only for a host listed in PETSTORE_WEBHOOK_ALLOW_HTTP (${url.hostname} is not)`;
}

/** The part of an endpoint's URL a log line may carry: its origin (a path or query may hold a token). */
export function urlOrigin(text: string): string {
  try {
    return new URL(text).origin;
  } catch {
    return '(not a URL)';
  }
}
