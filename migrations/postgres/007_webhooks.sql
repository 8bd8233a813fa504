-- Webhook endpoints and their deliveries (docs/webhooks.md). Times are Unix milliseconds.
--
-- An endpoint receives the events after its cursor (cursor_tx, cursor_seq: an event position,
-- as the feed orders them): at `webhooks add` (and `enable`) the cursor is the last event the
-- feed can list, so it gets every event created while it is enabled. An instance's relay moves
-- the cursor forward as it copies events into webhook_deliveries, a bounded batch at a time,
-- holding the endpoint's row lock (FOR UPDATE SKIP LOCKED: one instance at a time). A row there
-- is one event still owed to one endpoint, removed on success or give-up. The secret is kept as
-- issued: the relay signs with it.
CREATE TABLE webhook_endpoints (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  url TEXT NOT NULL,
  description TEXT NOT NULL,
  secret TEXT NOT NULL,
  previous_secret TEXT,
  previous_until BIGINT,
  created_at BIGINT NOT NULL,
  cursor_tx BIGINT NOT NULL,
  cursor_seq BIGINT NOT NULL,
  disabled_at BIGINT,
  failing_since BIGINT,
  last_success_at BIGINT,
  last_failure_at BIGINT
);

-- lease_until: an instance is making an attempt until then; past it, an abandoned attempt (a
-- killed instance) is taken over by another, whose claim skips rows being claimed (SKIP LOCKED).
-- attempts: how many were started, the one leased included.
CREATE TABLE webhook_deliveries (
  endpoint_id BIGINT NOT NULL,
  tx BIGINT NOT NULL,
  seq BIGINT NOT NULL,
  attempts INTEGER NOT NULL,
  next_at BIGINT NOT NULL,
  lease_until BIGINT,
  lease_owner TEXT,
  PRIMARY KEY (endpoint_id, tx, seq)
);
-- A claim takes each endpoint's earliest due deliveries, in turns across endpoints, and counts
-- the leases each endpoint holds (few: at most the attempts in flight).
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_at);
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (endpoint_id) WHERE lease_until IS NOT NULL;

-- The recent attempts, for `webhooks deliveries`: the newest 100 per endpoint are kept.
CREATE TABLE webhook_attempts (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  endpoint_id BIGINT NOT NULL,
  event_id TEXT NOT NULL,
  attempt INTEGER NOT NULL,
  at BIGINT NOT NULL,
  status INTEGER,
  error TEXT,
  duration_ms INTEGER NOT NULL
);
CREATE INDEX webhook_attempts_endpoint ON webhook_attempts (endpoint_id, id);
