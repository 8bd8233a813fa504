-- Idempotency-Key on createPet (docs/api.md#safe-retries-idempotency-key): the first answer, per API key and key, replayed
-- to retries until expires_at (unix ms). Expired rows are deleted a few at a time by later creates.
CREATE TABLE idempotency_keys (
  api_key_id INTEGER NOT NULL REFERENCES api_keys (id),
  key TEXT NOT NULL,
  fingerprint BLOB NOT NULL,
  response_status INTEGER NOT NULL,
  response_body TEXT NOT NULL,
  response_location TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (api_key_id, key)
) STRICT;

CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
