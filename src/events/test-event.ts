import { randomBytes } from 'node:crypto';
import http from 'node:http';
import https from 'node:https';
import type { SigningTarget } from '../store/webhooks.js';
import { postEvent, type Attempt } from './deliver.js';
import { signatures } from './signature.js';
import { refuseWebhookUrl } from './url-policy.js';

/** The type of the event `webhooks test` sends, which no feed lists. */
export const TEST_EVENT_TYPE = 'webhook.test';

/** A test event's id: `evt_test_` and 32 random hexadecimal digits, never a feed position. */
export const testEventId = () => `evt_test_${randomBytes(16).toString('hex')}`;

/**
 * Sends `target` one signed test event (docs/webhooks.md#sending-again): the shape of every
 * event, with `data` `{}`, signed as every delivery is, once, never retried. The URL policy
 * (`allowHttp`) is checked first, as before each of the relay's attempts. Never rejects.
 *
 * @example await sendTestEvent(target, { id: testEventId(), at: new Date(), allowHttp: [], timeoutMs: 10_000 })
 */
export async function sendTestEvent(
  target: SigningTarget,
  { id, at, allowHttp, timeoutMs }: { id: string; at: Date; allowHttp: readonly string[]; timeoutMs: number },
): Promise<Attempt> {
  const refused = refuseWebhookUrl(target.url, allowHttp);
  if (refused) {
    const error = `URL refused: ${refused}`;
    return { result: 'url_refused', ok: false, status: null, error, durationMs: 0, aborted: false };
  }
  const body = JSON.stringify({ id, type: TEST_EVENT_TYPE, createdAt: at.toISOString(), data: {} });
  const timestamp = Math.floor(at.getTime() / 1000);
  // One connection, closed after the answer: the command exits then.
  const agents = { http: new http.Agent(), https: new https.Agent() };
  try {
    return await postEvent({
      url: target.url,
      body,
      headers: {
        'webhook-id': id,
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signatures(target.secrets, id, timestamp, body),
      },
      timeoutMs,
      agents,
      signal: new AbortController().signal,
    });
  } finally {
    agents.http.destroy();
    agents.https.destroy();
  }
}
