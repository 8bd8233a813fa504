-- Per-endpoint back-off, and the attempts `webhooks deliveries` keeps (docs/webhooks.md).
--
-- failures: the endpoint's failed attempts in a row, with no success between them. From two on
-- it is down: it is probed, one attempt at a time, no earlier than probe_at (also set while a
-- probe is in flight, to its lease's end), and its first success releases every delivery
-- waiting for it (src/events/slots.ts). An endpoint failing when this is applied starts with one.
ALTER TABLE webhook_endpoints ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
ALTER TABLE webhook_endpoints ADD COLUMN probe_at INTEGER;
UPDATE webhook_endpoints SET failures = 1 WHERE failing_since IS NOT NULL;

-- The attempted event's position: every attempt of an event still waiting for the endpoint is
-- kept, besides the endpoint's last 1,000. Filled from the ids of the attempts kept so far (on
-- SQLite an id is 16 zeros and the sequence number, in hexadecimal).
ALTER TABLE webhook_attempts ADD COLUMN seq INTEGER;
UPDATE webhook_attempts SET seq = ((((((((((((((((instr('0123456789abcdef', substr(event_id, 21, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 22, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 23, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 24, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 25, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 26, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 27, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 28, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 29, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 30, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 31, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 32, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 33, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 34, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 35, 1)) - 1)) * 16 + (instr('0123456789abcdef', substr(event_id, 36, 1)) - 1)
WHERE length(event_id) = 36 AND substr(event_id, 1, 20) = 'evt_0000000000000000';
