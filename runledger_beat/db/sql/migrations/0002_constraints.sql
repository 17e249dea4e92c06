-- 0002: the door. CHECK constraints for every invariant of a schedule and a ledger row,
-- so raw SQL cannot write what beat cannot read. runledger_beat/limits.py holds the same
-- limits as Python constants (keep both in step; tests/test_constraints.py compares them).
--
-- Every constraint is added NOT VALID: the migration does not scan existing rows, so an
-- install holding old bad rows migrates in milliseconds, while every INSERT and every
-- UPDATE from now on is checked. Old bad rows stay readable (db.connect's loaders turn
-- out-of-range values into sentinels); beat quarantines a row it cannot plan (logged, kept
-- out of its claims, never fatal). Note that any UPDATE of an old bad row, even a cursor
-- move or `is_active = false`, is refused until the bad fields are fixed: fix or DELETE
-- such rows. Then `ALTER TABLE job_schedules VALIDATE CONSTRAINT <name>` (a SHARE UPDATE
-- EXCLUSIVE lock only) makes the guarantee total. Constraint names name the field they guard.
--
-- Runs with search_path set to the runledger schema; names are unqualified.

-- Whether a schedule's options are an object of known keys with values of the right type
-- (limits.OPTION_KEYS, limits.PROTOCOL_HEADERS). One expression, no subquery and no SET clause, so the
-- planner inlines it into the CHECK: a cursor move (beat updates thousands of rows per burst) pays
-- microseconds for it. CASE keeps casts from running on the wrong type; built-ins resolve from pg_catalog,
-- which Postgres always searches first.
CREATE FUNCTION runledger_options_valid(o jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN jsonb_typeof(o) <> 'object' THEN false
            WHEN o = '{}'::jsonb THEN true
            ELSE (o - ARRAY['queue', 'routing_key', 'exchange', 'exchange_type', 'priority', 'expires',
                            'time_limit', 'soft_time_limit', 'headers', 'ignore_result']) = '{}'::jsonb
             AND (NOT o ? 'queue' OR coalesce(jsonb_typeof(o -> 'queue') = 'string' AND char_length(o ->> 'queue') BETWEEN 1 AND 255, false))
             AND (NOT o ? 'routing_key' OR coalesce(jsonb_typeof(o -> 'routing_key') = 'string' AND char_length(o ->> 'routing_key') BETWEEN 1 AND 255, false))
             AND (NOT o ? 'exchange' OR coalesce(jsonb_typeof(o -> 'exchange') = 'string' AND char_length(o ->> 'exchange') BETWEEN 1 AND 255, false))
             AND (NOT o ? 'exchange_type' OR coalesce(jsonb_typeof(o -> 'exchange_type') = 'string' AND char_length(o ->> 'exchange_type') BETWEEN 1 AND 255, false))
             AND (NOT o ? 'priority' OR CASE WHEN jsonb_typeof(o -> 'priority') = 'number'
                                THEN (o ->> 'priority')::numeric BETWEEN 0 AND 255
                                 AND (o ->> 'priority')::numeric = trunc((o ->> 'priority')::numeric) ELSE false END)
             AND (NOT o ? 'expires' OR CASE WHEN jsonb_typeof(o -> 'expires') = 'number'
                                THEN (o ->> 'expires')::numeric > 0 AND (o ->> 'expires')::numeric <= 315360000 ELSE false END)
             AND (NOT o ? 'time_limit' OR CASE WHEN jsonb_typeof(o -> 'time_limit') = 'number'
                                THEN (o ->> 'time_limit')::numeric > 0 AND (o ->> 'time_limit')::numeric <= 315360000 ELSE false END)
             AND (NOT o ? 'soft_time_limit' OR CASE WHEN jsonb_typeof(o -> 'soft_time_limit') = 'number'
                                THEN (o ->> 'soft_time_limit')::numeric > 0 AND (o ->> 'soft_time_limit')::numeric <= 315360000 ELSE false END)
             AND (NOT o ? 'headers' OR CASE WHEN jsonb_typeof(o -> 'headers') = 'object'
                                THEN NOT (o -> 'headers') ?| ARRAY['lang', 'task', 'id', 'root_id', 'parent_id', 'group',
                                    'meth', 'shadow', 'eta', 'expires', 'retries', 'timelimit', 'argsrepr', 'kwargsrepr',
                                    'origin', 'ignore_result', 'replaced_task_nesting', 'stamped_headers', 'stamps',
                                    'runledger_id', '_schedule'] ELSE false END)
             AND (NOT o ? 'ignore_result' OR jsonb_typeof(o -> 'ignore_result') = 'boolean')
END
$$;

-- Whether a payload template is {"args": [...], "kwargs": {...}} and nothing else, at most 1 MiB stored.
CREATE FUNCTION runledger_template_valid(t jsonb) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN jsonb_typeof(t) = 'object'
            THEN coalesce(jsonb_typeof(t -> 'args') = 'array', false)
             AND coalesce(jsonb_typeof(t -> 'kwargs') = 'object', false)
             AND t - 'args' - 'kwargs' = '{}'::jsonb
             AND pg_column_size(t) <= 1048576
            ELSE false END
$$;

-- CHECK constraints call these as the writing role, so every role that writes job_schedules needs EXECUTE:
-- granted explicitly (pure functions of their argument), whatever default privileges an install has set.
GRANT EXECUTE ON FUNCTION runledger_options_valid(jsonb), runledger_template_valid(jsonb) TO PUBLIC;

ALTER TABLE job_schedules
    -- Instants: finite and a day inside Python's year 1..9999 (limits.MIN_INSTANT, MAX_INSTANT).
    ADD CONSTRAINT job_schedules_next_fire_at_in_range CHECK (
        isfinite(next_fire_at)
        AND next_fire_at >= '0001-01-02 00:00:00+00' AND next_fire_at < '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT job_schedules_last_fired_at_in_range CHECK (
        isfinite(last_fired_at)
        AND last_fired_at >= '0001-01-02 00:00:00+00' AND last_fired_at < '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT job_schedules_run_at_in_range CHECK (
        isfinite(run_at)
        AND run_at >= '0001-01-02 00:00:00+00' AND run_at < '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT job_schedules_anchor_at_in_range CHECK (
        isfinite(anchor_at)
        AND anchor_at >= '0001-01-02 00:00:00+00' AND anchor_at < '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT job_schedules_start_at_in_range CHECK (
        isfinite(start_at)
        AND start_at >= '0001-01-02 00:00:00+00' AND start_at < '9999-12-31 00:00:00+00') NOT VALID,
    ADD CONSTRAINT job_schedules_end_at_in_range CHECK (
        isfinite(end_at)
        AND end_at >= '0001-01-02 00:00:00+00' AND end_at < '9999-12-31 00:00:00+00') NOT VALID,
    -- Durations: finite (NaN and infinity compare above every number), whole intervals of at least a second.
    ADD CONSTRAINT job_schedules_interval_seconds_in_range CHECK (
        interval_seconds <> 'NaN' AND interval_seconds >= 1 AND interval_seconds <= 315360000) NOT VALID,
    ADD CONSTRAINT job_schedules_misfire_grace_seconds_in_range CHECK (
        misfire_grace_seconds <> 'NaN' AND misfire_grace_seconds >= 0
        AND misfire_grace_seconds <= 315360000) NOT VALID,
    -- Each kind carries its own column.
    ADD CONSTRAINT job_schedules_cron_has_cron_expr CHECK (kind <> 'cron' OR cron_expr IS NOT NULL) NOT VALID,
    ADD CONSTRAINT job_schedules_interval_has_interval_seconds CHECK (
        kind <> 'interval' OR interval_seconds IS NOT NULL) NOT VALID,
    ADD CONSTRAINT job_schedules_once_has_run_at CHECK (kind <> 'once' OR run_at IS NOT NULL) NOT VALID,
    -- Payload and options.
    ADD CONSTRAINT job_schedules_payload_template_valid CHECK (runledger_template_valid(payload_template)) NOT VALID,
    ADD CONSTRAINT job_schedules_options_valid CHECK (runledger_options_valid(options)) NOT VALID,
    -- Bounded, printable text (no C0/C1 control characters in names).
    ADD CONSTRAINT job_schedules_name_length CHECK (char_length(name) <= 200) NOT VALID,
    ADD CONSTRAINT job_schedules_name_printable CHECK (name !~ '[\x01-\x1f\x7f-\x9f]') NOT VALID,
    ADD CONSTRAINT job_schedules_job_type_length CHECK (char_length(job_type) <= 200) NOT VALID,
    ADD CONSTRAINT job_schedules_job_type_printable CHECK (job_type !~ '[\x01-\x1f\x7f-\x9f]') NOT VALID,
    ADD CONSTRAINT job_schedules_timezone_length CHECK (char_length(timezone) <= 64) NOT VALID,
    ADD CONSTRAINT job_schedules_cron_expr_length CHECK (char_length(cron_expr) <= 256) NOT VALID;

ALTER TABLE jobs
    ADD CONSTRAINT jobs_status_valid CHECK (status IN ('pending', 'sent', 'received', 'started', 'retry',
                                                      'success', 'failure', 'revoked', 'skipped', 'lost',
                                                      'expired', 'failed', 'buffered')) NOT VALID;
