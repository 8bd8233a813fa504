-- AUTOINCREMENT: ids are never reused, even after the newest row is gone (docs/api.md#ids-and-int64).
CREATE TABLE pets (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  category_id INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
) STRICT;

-- listPets with a status filter pages by (status, id) without a scan.
CREATE INDEX pets_status_id ON pets (status, id);

CREATE TABLE api_keys (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  hint TEXT NOT NULL,
  hash BLOB NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  revoked_at TEXT
) STRICT;
