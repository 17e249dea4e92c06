-- The privileges each role needs, by role: what `runledger-beat grants KIND ROLE [--schema S]` prints
-- (runledger_beat/grants.py) and what tests/test_privileges.py and tests/test_attacks.py run each role under.
-- Templates, not statements: runledger_beat.grants fills {schema} and {role} in as quoted identifiers
-- (psycopg.sql.Identifier), and nothing else. Statements end with a semicolon at the end of a line.
-- SECURITY.md says what each role may do and what it must not be able to do.

-- grants_beat --
-- Beat: claim schedules, record and publish fires, import beat_schedule, maintain the ledger, prune the audit log.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.schema_migrations TO {role};
GRANT SELECT, INSERT, UPDATE ON {schema}.job_schedules, {schema}.jobs TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.schedule_faults TO {role};
GRANT SELECT ON {schema}.workers TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.beats TO {role};
GRANT SELECT ON {schema}.calendars TO {role};
GRANT SELECT, DELETE ON {schema}.schedule_changes TO {role};
GRANT EXECUTE ON FUNCTION {schema}.runledger_maintain_ledger(interval, integer),
                          {schema}.runledger_advance_cursors(uuid[], timestamptz[], boolean[]) TO {role};

-- grants_worker --
-- Workers with the ledger hook: a run's state on its ledger row (never what it runs), and the worker's own report.
-- The REVOKE narrows an UPDATE granted on the whole table before (a table-level REVOKE takes column grants too).
GRANT USAGE ON SCHEMA {schema} TO {role};
REVOKE UPDATE ON {schema}.jobs FROM {role};
GRANT SELECT, UPDATE (status, started_at, finished_at, worker, retries, duplicates, last_error,
                      sent_at, dispatch_attempts, released_at) ON {schema}.jobs TO {role};
GRANT SELECT, INSERT, UPDATE ON {schema}.workers TO {role};

-- grants_cli --
-- The CLI and the Python API: add, update, list, show, pause, resume, remove, trigger, backfill, history, calendars,
-- audit, beats, health.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.job_schedules TO {role};
GRANT SELECT, INSERT ON {schema}.jobs TO {role};
GRANT SELECT, DELETE ON {schema}.schedule_faults TO {role};
GRANT SELECT ON {schema}.beats TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.calendars TO {role};
GRANT SELECT ON {schema}.schedule_changes TO {role};

-- grants_dashboard --
-- The dashboard, reading only: every page and the JSON API's reads.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.job_schedules, {schema}.jobs, {schema}.schedule_faults, {schema}.beats,
                {schema}.calendars TO {role};

-- grants_dashboard_writer --
-- The dashboard with a token: its pages, and pause (with a note), resume, trigger and backfill; a schedule's
-- state and pause note only, never what it runs.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT ON {schema}.job_schedules, {schema}.jobs, {schema}.schedule_faults, {schema}.beats,
                {schema}.calendars TO {role};
GRANT UPDATE (is_active, next_fire_at, updated_at, pause_note, paused_at, paused_by, paused_by_application)
    ON {schema}.job_schedules TO {role};
GRANT INSERT ON {schema}.jobs TO {role};
GRANT DELETE ON {schema}.schedule_faults TO {role};
