import { describe } from 'node:test';
import { importHttpSuite } from './http-suite.js';

// The HTTP behaviour files once more, every app on a fresh PostgreSQL schema (test/helpers.ts).
process.env.PETSTORE_TEST_STORE = 'postgres';

describe('on PostgreSQL', async () => {
  await importHttpSuite();
});
