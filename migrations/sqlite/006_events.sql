-- The outbox: one row per event, written in the transaction that stores what it announces, so a
-- 201 and its event are one fact (docs/events.md). SQLite's writers take turns, so seq grows in
-- commit order and the feed pages by it alone. AUTOINCREMENT: a seq is never reused, even after
-- retention removed the newest rows. `data` is the JSON text the client was answered, kept as
-- text so every int64 digit survives. Webhook endpoints and their deliveries get tables of their
-- own, keyed by seq.
CREATE TABLE events (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  type TEXT NOT NULL,
  created_at TEXT NOT NULL,
  data TEXT NOT NULL
) STRICT;
