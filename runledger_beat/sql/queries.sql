-- Every SQL statement runledger_beat runs, by name. Python refers to them as
-- queries.NAME (runledger_beat/queries.py). The line after the name says what
-- the statement is for. All run with search_path set to the runledger schema.

-- migrate_lock --
-- Serialise migrations across processes for this schema (released at commit).
SELECT pg_advisory_xact_lock(hashtextextended('runledger_beat.migrate.' || %(schema)s, 0));

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

-- mark_internal --
-- Beat's own cursor moves must not wake the other beats.
SELECT set_config('runledger.internal', 'on', true);

-- claim_due_schedules --
-- Lock up to %(limit)s due schedules, judged by the database clock; rows another beat holds are skipped.
SELECT s.id, s.name, s.job_type, s.organization_id, s.payload_template, s.kind,
       s.cron_expr, s.cron_day_and, s.interval_seconds, s.run_at, s.anchor_at,
       s.timezone, s.next_fire_at, s.max_jitter_seconds, s.options,
       s.misfire_policy, s.misfire_grace_seconds, s.overlap_policy,
       s.start_at, s.end_at,
       (s.overlap_policy = 'skip' AND EXISTS (
            SELECT 1 FROM jobs j
             WHERE j.schedule_id = s.id
               AND j.status IN ('pending', 'sent', 'received', 'started', 'retry'))) AS busy,
       now() AS db_now
  FROM job_schedules s
 WHERE s.is_active AND s.next_fire_at <= now()
 ORDER BY s.next_fire_at
 LIMIT %(limit)s
   FOR UPDATE OF s SKIP LOCKED;

-- insert_fires --
-- Record a batch of fires as ledger rows; a slot already recorded is left alone.
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type,
                  organization_id, payload, options, stage, status, last_error, finished_at)
SELECT f.id, s.id, s.name, f.scheduled_for, s.job_type,
       s.organization_id, f.payload, s.options, 'scheduled', f.status, f.note,
       CASE WHEN f.status = 'skipped' THEN now() END
  FROM unnest(%(ids)s::uuid[], %(schedule_ids)s::uuid[],
              %(scheduled_fors)s::timestamptz[], %(payloads)s::jsonb[],
              %(statuses)s::text[], %(notes)s::text[])
       AS f(id, schedule_id, scheduled_for, payload, status, note)
  JOIN job_schedules s ON s.id = f.schedule_id
ON CONFLICT (schedule_id, scheduled_for) WHERE stage = 'scheduled' DO NOTHING
RETURNING id;

-- advance_cursors --
-- Move each claimed schedule's cursor; a schedule with no next fire is deactivated.
UPDATE job_schedules s
   SET next_fire_at  = u.next_fire_at,
       last_fired_at = CASE WHEN u.fired THEN now() ELSE s.last_fired_at END,
       is_active     = u.next_fire_at IS NOT NULL,
       updated_at    = now()
  FROM unnest(%(ids)s::uuid[], %(next_fire_ats)s::timestamptz[], %(fired)s::boolean[])
       AS u(id, next_fire_at, fired)
 WHERE s.id = u.id;

-- defer_schedule --
-- Push a schedule that failed to materialize out of the due window.
UPDATE job_schedules
   SET next_fire_at = now() + make_interval(secs => %(delay)s),
       updated_at = now()
 WHERE id = %(id)s;

-- next_due_in --
-- Seconds from the database clock to the earliest active cursor (NULL when none).
SELECT extract(epoch FROM (min(next_fire_at) - now()))::float8 AS seconds
  FROM job_schedules
 WHERE is_active;

-- mark_sent --
-- Fires handed to the broker; a row a worker already moved on is left alone.
UPDATE jobs
   SET status = 'sent', sent_at = now(),
       dispatch_attempts = dispatch_attempts + 1, last_error = NULL
 WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending';

-- mark_publish_failed --
-- Count a failed publish and keep its error; the row stays pending for the sweep.
UPDATE jobs
   SET dispatch_attempts = dispatch_attempts + 1, last_error = %(error)s
 WHERE id = ANY(%(ids)s::uuid[]) AND status = 'pending';

-- claim_pending_jobs --
-- Ledger rows still unpublished after the grace (manual triggers at once), locked for one sweeper.
SELECT id, job_type, payload, options, schedule_id, schedule_name, scheduled_for
  FROM jobs
 WHERE status = 'pending'
   AND (stage = 'manual' OR created_at < now() - make_interval(secs => %(grace)s))
 ORDER BY created_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;
