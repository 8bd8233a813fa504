-- Deliberately empty: the same number as PostgreSQL's 008_webhook_due_order, so both stores carry
-- the same numbered steps. SQLite's due index (endpoint_id, next_at) already ends with the rowid,
-- which is the order the deliveries were handed out in, the feed's (src/store/sqlite-webhooks.ts):
-- a claim reads it in order without a sort.
SELECT 1;
