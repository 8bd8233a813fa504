-- Deliberately empty: the same number as SQLite's 004_pet_counts, so both stores carry the same
-- numbered steps. SQLite keeps the animals' counts in a table its triggers update, because a
-- GROUP BY there blocks the process. PostgreSQL runs that GROUP BY on the server, cached for
-- PET_COUNTS_MAX_AGE_MS per instance (src/store/postgres.ts), and a trigger-kept table would make
-- every create from every instance update one of three shared rows: slower creates and lock
-- waits between instances (docs/operations-resilience.md).
SELECT 1;
