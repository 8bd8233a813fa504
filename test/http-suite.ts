/**
 * The HTTP behaviour files that run once more on PostgreSQL (test/postgres-suite.test.ts), and
 * with a read replica besides (test/replica-suite.test.ts): imported inside the caller's describe,
 * each file's tests run there, every app on a fresh PostgreSQL schema (test/helpers.ts).
 */
export async function importHttpSuite(): Promise<void> {
  await import('./auth.test.js');
  await import('./errors.test.js');
  await import('./http-raw.test.js');
  await import('./idempotency.test.js');
  await import('./metrics.test.js');
  await import('./nothing-stored.test.js');
  await import('./pets-create.test.js');
  await import('./pets-get.test.js');
  await import('./pets-list.test.js');
  await import('./pets-validation.test.js');
  await import('./rate-limit.test.js');
}
