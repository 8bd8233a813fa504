-- The relay claims an endpoint's due deliveries in the order the feed lists their events: by
-- next_at, then the event's position (tx, seq), so a delivery given back by a stopped relay is
-- not sent after later events (docs/webhooks.md#the-relay). The due index carries that whole
-- order, so a claim reads the first entries of the endpoint's range instead of every due row
-- sorted (with 50 endpoints of 1,000 waiting deliveries each, a sort of all 50,000 at every look).
DROP INDEX webhook_deliveries_due;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_at, tx, seq);
