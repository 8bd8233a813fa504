-- When each key last called a deprecated operation (getPet), written like last_used_at: in
-- batches, at most once a minute per key and instance (docs/keys.md#listing-keys).
ALTER TABLE api_keys ADD COLUMN last_deprecated_use_at TEXT;
