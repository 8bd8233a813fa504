import { createHmac, randomBytes } from 'node:crypto';

const PREFIX = 'whsec_';
const SECRET_BYTES = 32;

/** A new signing secret: `whsec_` and the base64 of 32 random bytes (Standard Webhooks). */
export function makeSecret(): string {
  return PREFIX + randomBytes(SECRET_BYTES).toString('base64');
}

/**
 * One Standard Webhooks signature: `v1,` and the base64 HMAC-SHA256 of
 * `<webhook-id>.<webhook-timestamp>.<body>`, keyed by the secret's base64-decoded bytes
 * (docs/webhooks.md#signatures).
 *
 * @example sign('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'evt_…', 1700000000, '{"id":…}')
 */
export function sign(secret: string, id: string, timestamp: number, body: string): string {
  const key = Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
  return 'v1,' + createHmac('sha256', key).update(`${id}.${timestamp}.`).update(body).digest('base64');
}

/** The `webhook-signature` value: one signature per secret, space-separated (several during a roll). */
export function signatures(secrets: readonly string[], id: string, timestamp: number, body: string): string {
  return secrets.map((secret) => sign(secret, id, timestamp, body)).join(' ');
}
