import { describe } from 'node:test';

// The HTTP behaviour files once more, every app on a fresh PostgreSQL schema (test/helpers.ts).
process.env.PETSTORE_TEST_STORE = 'postgres';

describe('on PostgreSQL', async () => {
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
});
