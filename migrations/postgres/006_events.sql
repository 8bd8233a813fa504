-- The outbox: one row per event, written in the statement (or transaction) that stores what it
-- announces, so a 201 and its event are one fact (docs/events.md). `data` is the JSON text the
-- client was answered, kept as text so every int64 digit survives.
--
-- Order: seq comes from a sequence before commit, so a lower seq can become visible after a
-- higher one. tx, the writing transaction's id, fixes that: the feed lists events by (tx, seq)
-- and only those whose transaction is older than every transaction still running
-- (pg_snapshot_xmin), so no event can later appear before one already listed. One index serves
-- the feed, the retention's oldest-first deletes and, later, the webhook relay's reads.
CREATE TABLE events (
  tx xid8 NOT NULL DEFAULT pg_current_xact_id(),
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  type TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (tx, seq)
);
