-- The outbox: one row per event, written in the statement (or transaction) that stores what it
-- announces, so a 201 and its event are one fact (docs/events.md). `data` is the JSON text the
-- client was answered, kept as text so every int64 digit survives.
--
-- Order (docs/events.md#ordering): seq comes from a sequence before commit, so a lower seq can
-- become visible after a higher one. tx, the writing transaction's id, fixes that: the feed lists
-- events by (tx, seq), and only those whose transaction is older than every transaction still
-- running (pg_snapshot_xmin), so no event can later appear before one already listed. One index
-- serves the feed, the retention's oldest-first deletes and a relay's reads.
--
-- tx is the transaction id plus event_clock.tx_offset: 0, until the database is restored into
-- a server whose transaction ids are lower than those the events recorded (pg_dump and restore,
-- logical replication). The service then raises the offset when it starts (migrate), so new
-- events still sort after the restored ones and the ids readers hold stay valid.
CREATE TABLE event_clock (
  one BOOLEAN PRIMARY KEY DEFAULT true CHECK (one),
  tx_offset BIGINT NOT NULL
);
INSERT INTO event_clock (tx_offset) VALUES (0);

CREATE TABLE events (
  tx BIGINT NOT NULL,
  seq BIGINT GENERATED ALWAYS AS IDENTITY,
  type TEXT NOT NULL,
  created_at TIMESTAMPTZ NOT NULL,
  data TEXT NOT NULL,
  PRIMARY KEY (tx, seq)
);
