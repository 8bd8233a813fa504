-- Per-endpoint back-off, the attempts `webhooks deliveries` keeps, and the relays woken by the
-- commits that write events (docs/webhooks.md).
--
-- failures: the endpoint's failed attempts in a row, with no success between them. From two on
-- it is down: it is probed, one attempt at a time by one instance, no earlier than probe_at
-- (also set while a probe is in flight, to its lease's end), and its first success releases every
-- delivery waiting for it (src/events/slots.ts). An endpoint failing when this is applied starts
-- with one.
ALTER TABLE webhook_endpoints ADD COLUMN failures INTEGER NOT NULL DEFAULT 0, ADD COLUMN probe_at BIGINT;
UPDATE webhook_endpoints SET failures = 1 WHERE failing_since IS NOT NULL;

-- The attempted event's position: every attempt of an event still waiting for the endpoint is
-- kept, besides the endpoint's last 1,000. Filled from the ids of the attempts kept so far.
ALTER TABLE webhook_attempts ADD COLUMN tx BIGINT, ADD COLUMN seq BIGINT;
UPDATE webhook_attempts SET tx = ('x' || substr(event_id, 5, 16))::bit(64)::bigint,
  seq = ('x' || substr(event_id, 21, 16))::bit(64)::bigint
WHERE event_id ~ '^evt_[0-9a-f]{32}$';

-- Every instance's relay is woken by each commit that writes events (LISTEN on the channel
-- petstore_events, src/store/postgres-listen.ts): the notification is sent as the transaction
-- commits, and not at all when it rolls back. Its payload is the schema, since instances on
-- other schemas of the database listen on the same channel. None is sent while no endpoint is
-- enabled: nothing would be delivered.
CREATE FUNCTION notify_events_written() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL) THEN
    PERFORM pg_notify('petstore_events', current_schema());
  END IF;
  RETURN NULL;
END
$$;
CREATE TRIGGER events_written AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION notify_events_written();
