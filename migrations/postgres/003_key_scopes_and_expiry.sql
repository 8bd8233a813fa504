-- Scopes, expiry, rotation and last use of API keys (docs/keys.md).
-- scopes: space-separated, as OAuth writes them (RFC 6749 section 3.3); keys issued before
-- scopes existed keep all three. replaced_by: the successor `keys roll` issued; set once, by a
-- conditional UPDATE, so a key never has two live successors.
ALTER TABLE api_keys
  ADD COLUMN scopes TEXT NOT NULL DEFAULT 'pets:read pets:write metrics:read',
  ADD COLUMN expires_at TIMESTAMPTZ,
  ADD COLUMN last_used_at TIMESTAMPTZ,
  ADD COLUMN replaced_by BIGINT UNIQUE REFERENCES api_keys (id);
