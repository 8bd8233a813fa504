-- GENERATED ALWAYS AS IDENTITY: ids come from a sequence, so they are never reused, even after
-- the newest row is gone, and a client can never choose one (docs/api.md#ids-and-int64).
CREATE TABLE pets (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name TEXT NOT NULL,
  category_id BIGINT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('available', 'pending', 'sold'))
);

-- listPets with a status filter pages by (status, id) without a scan.
CREATE INDEX pets_status_id ON pets (status, id);

CREATE TABLE api_keys (
  id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  name TEXT NOT NULL,
  hint TEXT NOT NULL,
  hash BYTEA NOT NULL UNIQUE,
  created_at TIMESTAMPTZ NOT NULL,
  revoked_at TIMESTAMPTZ
);
