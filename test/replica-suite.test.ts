import { describe } from 'node:test';
import { importHttpSuite } from './http-suite.js';
import { pairSkip, sharedPair } from './replica-cluster.js';

// The store contract, the feed and the HTTP behaviour files once more on PostgreSQL, every store
// reading from a streaming replica (DATABASE_READ_URLS): of a primary this file starts, which
// test/stores.ts then opens every store on (PETSTORE_TEST_DATABASE_URL and _READ_URLS).
if (!pairSkip) {
  const pair = await sharedPair();
  process.env.PETSTORE_TEST_DATABASE_URL = pair.primary.url;
  process.env.PETSTORE_TEST_DATABASE_READ_URLS = pair.replica.url;
  process.env.PETSTORE_TEST_STORE = 'postgres';
}

describe('on PostgreSQL with a read replica', { skip: pairSkip }, async () => {
  await import('./store-contract.test.js');
  await import('./events-feed.test.js');
  await importHttpSuite();
});
