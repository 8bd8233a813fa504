-- Webhook endpoints and their deliveries (docs/webhooks.md). Times are Unix milliseconds.
--
-- An endpoint receives the events after its cursor: at `webhooks add` (and `enable`) the cursor
-- is the last event written, so it gets every event created while it is enabled. The relay
-- moves the cursor forward as it copies events into webhook_deliveries, a bounded batch at a
-- time: a row there is one event still owed to one endpoint, removed on success or give-up.
-- The secret is kept as issued: the relay signs with it (the file is owner-only).
CREATE TABLE webhook_endpoints (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  url TEXT NOT NULL,
  description TEXT NOT NULL,
  secret TEXT NOT NULL,
  previous_secret TEXT,
  previous_until INTEGER,
  created_at INTEGER NOT NULL,
  cursor_seq INTEGER NOT NULL,
  disabled_at INTEGER,
  failing_since INTEGER,
  last_success_at INTEGER,
  last_failure_at INTEGER
) STRICT;

-- lease_until: an attempt is being made until then; past it, an abandoned attempt (a killed
-- process) is taken over. attempts: how many were started, the one leased included.
CREATE TABLE webhook_deliveries (
  endpoint_id INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  attempts INTEGER NOT NULL,
  next_at INTEGER NOT NULL,
  lease_until INTEGER,
  lease_owner TEXT,
  PRIMARY KEY (endpoint_id, seq)
) STRICT;
-- A claim takes each endpoint's earliest due deliveries, in turns across endpoints, and counts
-- the leases each endpoint holds (few: at most the attempts in flight).
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_at);
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (endpoint_id) WHERE lease_until IS NOT NULL;

-- The recent attempts, for `webhooks deliveries`: the newest 100 per endpoint are kept.
CREATE TABLE webhook_attempts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  endpoint_id INTEGER NOT NULL,
  event_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  at INTEGER NOT NULL,
  status INTEGER,
  error TEXT,
  duration_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, id);
