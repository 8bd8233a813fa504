-- Idempotency-Key on createPet (docs/api.md#safe-retries-idempotency-key): the first answer, per API key and key, replayed
-- to retries until expires_at (unix ms). Expired rows are deleted a few at a time by later creates.
CREATE TABLE idempotency_keys (
  api_key_id BIGINT NOT NULL REFERENCES api_keys (id),
  key TEXT NOT NULL,
  fingerprint BYTEA NOT NULL,
  response_status INTEGER NOT NULL,
  response_body TEXT NOT NULL,
  response_location TEXT NOT NULL,
  created_at BIGINT NOT NULL,
  expires_at BIGINT NOT NULL,
  PRIMARY KEY (api_key_id, key)
);

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);

-- Hits per rate-limit subject and fixed window, shared by every instance. UNLOGGED: no WAL and
-- no fsync per request; after a database crash the counts start again from zero, which is harmless.
CREATE UNLOGGED TABLE rate_counters (
  subject TEXT NOT NULL,
  window_start BIGINT NOT NULL,
  hits INTEGER NOT NULL,
  PRIMARY KEY (subject, window_start)
);
