-- The migration runner's own statements (db/migrate.py).
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME. All run with search_path set to the runledger schema.

-- migrate_lock --
-- Serialise migrations across processes for this schema (released at commit).
SELECT pg_advisory_xact_lock(hashtextextended('runledger_beat.migrate.' || %(schema)s, 0));

-- migrate_hold_preparing --
-- A migration step retried after a lock timeout waits (as long as it takes: no table lock is requested yet)
-- until no beat holds an instant prepared, and keeps beats from preparing one until it commits: their open
-- transactions on the tables it alters are then a few milliseconds long, so its bounded lock waits succeed.
SELECT pg_advisory_xact_lock(hashtextextended('runledger_beat.prepare.' || %(schema)s, 0));

-- bound_lock_waits --
-- A migration step waits this long at most for a table lock (this transaction only), then lets go.
SELECT set_config('lock_timeout', %(ms)s, true);

-- create_migrations_table --
-- The record of applied migrations.
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- applied_migrations --
-- Versions already applied.
SELECT version FROM schema_migrations ORDER BY version;

-- record_migration --
-- Mark one migration applied.
INSERT INTO schema_migrations (version, name) VALUES (%(version)s, %(name)s);

-- schema_ready --
-- Whether the schema holds the tables (used when auto-migrate is off).
SELECT to_regclass(%(table)s) IS NOT NULL AS ready;

-- runledger_tables --
-- Whether a schema holds the migrations table, job_schedules and jobs; read from the catalog, so a role
-- without privileges on the schema gets an answer too (the command line checks it before any command).
SELECT count(*) = 3 AS present
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = %(schema)s AND c.relname IN ('schema_migrations', 'job_schedules', 'jobs')
   AND c.relkind IN ('r', 'p');
