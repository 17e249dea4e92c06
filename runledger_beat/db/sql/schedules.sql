-- Schedules and their ledger as the API, the command line, the importer and the dashboard read and
-- write them (api.py, importer.py, through db.schedule_store): definitions, pause notes, manual triggers,
-- backfill, calendars, history and the audit log.
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME; the stores run them with every runledger name schema-qualified (queries.for_schema).

-- api_db_now --
-- The database clock, which judges due-ness; API cursors are computed from it.
SELECT now() AS now;

-- api_get_schedule --
-- One schedule by name, with its fault record if any.
SELECT s.*, q.failures, q.last_error, q.retry_at, q.quarantined_at
  FROM job_schedules s LEFT JOIN schedule_faults q ON q.schedule_id = s.id
 WHERE s.name = %(name)s;

-- api_lock_schedule --
-- One schedule by name, locked for a read-modify-write.
SELECT * FROM job_schedules WHERE name = %(name)s FOR UPDATE;

-- api_insert_schedule --
-- Create a schedule (API, CLI or config import).
INSERT INTO job_schedules (id, name, job_type, organization_id, payload_template, kind,
                           cron_expr, cron_day_and, interval_seconds, run_at, anchor_at,
                           timezone, is_active, next_fire_at, max_jitter_seconds, options,
                           misfire_policy, misfire_grace_seconds, overlap_policy,
                           start_at, end_at, source, skip_dates, calendar, overlap_terminate)
VALUES (%(id)s, %(name)s, %(job_type)s, %(organization_id)s, %(payload_template)s, %(kind)s,
        %(cron_expr)s, %(cron_day_and)s, %(interval_seconds)s, %(run_at)s, %(anchor_at)s,
        %(timezone)s, %(is_active)s, %(next_fire_at)s, %(max_jitter_seconds)s, %(options)s,
        %(misfire_policy)s, %(misfire_grace_seconds)s, %(overlap_policy)s,
        %(start_at)s, %(end_at)s, %(source)s, %(skip_dates)s::date[], %(calendar)s, %(overlap_terminate)s)
RETURNING *;

-- api_update_schedule --
-- Replace a schedule's definition and cursor.
UPDATE job_schedules
   SET job_type = %(job_type)s, organization_id = %(organization_id)s,
       payload_template = %(payload_template)s, kind = %(kind)s, cron_expr = %(cron_expr)s,
       cron_day_and = %(cron_day_and)s, interval_seconds = %(interval_seconds)s,
       run_at = %(run_at)s, anchor_at = %(anchor_at)s, timezone = %(timezone)s,
       is_active = %(is_active)s, next_fire_at = %(next_fire_at)s,
       max_jitter_seconds = %(max_jitter_seconds)s, options = %(options)s,
       misfire_policy = %(misfire_policy)s, misfire_grace_seconds = %(misfire_grace_seconds)s,
       overlap_policy = %(overlap_policy)s, start_at = %(start_at)s, end_at = %(end_at)s,
       source = %(source)s, skip_dates = %(skip_dates)s::date[], calendar = %(calendar)s,
       overlap_terminate = %(overlap_terminate)s, updated_at = now()
 WHERE id = %(id)s
RETURNING *;

-- api_list_schedules --
-- Schedules by name with their fault records, optionally filtered by task, organization and active flag.
SELECT s.*, q.failures, q.last_error, q.retry_at, q.quarantined_at
  FROM job_schedules s LEFT JOIN schedule_faults q ON q.schedule_id = s.id
 WHERE (%(task)s::text IS NULL OR s.job_type = %(task)s::text)
   AND (%(organization_id)s::uuid IS NULL OR s.organization_id = %(organization_id)s::uuid)
   AND (%(active)s::boolean IS NULL OR s.is_active = %(active)s::boolean)
 ORDER BY s.name;

-- api_set_active --
-- Pause or resume a schedule, setting its cursor.
UPDATE job_schedules
   SET is_active = %(active)s, next_fire_at = %(next_fire_at)s, updated_at = now()
 WHERE id = %(id)s
RETURNING *;

-- api_delete_schedule --
-- Remove a schedule; its ledger rows keep their history (schedule_id set to NULL).
DELETE FROM job_schedules WHERE name = %(name)s RETURNING id;

-- api_insert_manual_job --
-- A manual trigger: a pending ledger row the beats' recovery sweep publishes at once.
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type,
                  organization_id, payload, options, stage, status)
VALUES (%(id)s, %(schedule_id)s, %(schedule_name)s, %(scheduled_for)s, %(job_type)s,
        %(organization_id)s, %(payload)s, %(options)s, 'manual', 'pending')
RETURNING *;

-- api_notify_schedules --
-- Wake the running beats (a manual trigger does not touch job_schedules).
SELECT pg_notify('runledger_schedules', '');

-- api_history --
-- The latest ledger rows of a schedule by name, newest first, optionally of one status: the rows of the schedule
-- that holds the name now (jobs_schedule_history_idx) and those of removed schedules of that name
-- (jobs_removed_schedule_idx), never a scan of the ledger.
SELECT * FROM (
    (SELECT * FROM jobs
      WHERE schedule_id = (SELECT id FROM job_schedules WHERE name = %(name)s) AND schedule_name = %(name)s
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
      ORDER BY created_at DESC, scheduled_for DESC NULLS LAST
      LIMIT %(limit)s)
    UNION ALL
    (SELECT * FROM jobs
      WHERE schedule_id IS NULL AND schedule_name = %(name)s
        AND (%(status)s::text IS NULL OR status = %(status)s::text)
      ORDER BY created_at DESC, scheduled_for DESC NULLS LAST
      LIMIT %(limit)s)
) h
 ORDER BY created_at DESC, scheduled_for DESC NULLS LAST
 LIMIT %(limit)s;

-- api_config_schedules --
-- Every schedule imported from a Celery beat_schedule.
SELECT * FROM job_schedules WHERE source = 'config' ORDER BY name;

-- api_deactivate_config --
-- Deactivate config-imported schedules no longer in the beat_schedule.
UPDATE job_schedules
   SET is_active = false, next_fire_at = NULL, updated_at = now()
 WHERE id = ANY(%(ids)s::uuid[]) AND source = 'config' AND is_active
RETURNING name;

-- feature_pause_schedule --
-- Pause a schedule (cursor cleared), keeping the note, when, and who: the role and the session's application_name.
UPDATE job_schedules
   SET is_active = false, next_fire_at = NULL, updated_at = now(),
       pause_note = %(note)s, paused_at = now(), paused_by = current_user,
       paused_by_application = current_setting('application_name')
 WHERE id = %(id)s
RETURNING *;

-- feature_clear_pause --
-- Forget a schedule's pause note (it was resumed or activated).
UPDATE job_schedules
   SET pause_note = NULL, paused_at = NULL, paused_by = NULL, paused_by_application = NULL
 WHERE id = %(id)s AND (paused_at IS NOT NULL OR pause_note IS NOT NULL)
RETURNING *;

-- feature_audit --
-- The audit log, newest last, optionally of one schedule name and since %(since)s seconds ago.
SELECT id, at, who, application_name, operation, schedule_id, schedule_name, before, after
  FROM schedule_changes
 WHERE (%(name)s::text IS NULL OR schedule_name = %(name)s::text)
   AND (%(since)s::float8 IS NULL OR at >= now() - make_interval(secs => %(since)s::float8))
 ORDER BY at, id
 LIMIT %(limit)s;

-- feature_insert_backfill --
-- Backfill: one pending ledger row per slot of the schedule (stage 'scheduled', marked backfill so the sweep
-- publishes it at once); a slot already in the ledger is left alone. Parameters travel in binary.
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, organization_id,
                  payload, options, stage, status, backfill, created_at)
SELECT f.id, s.id, s.name, f.scheduled_for, s.job_type, s.organization_id,
       f.payload::jsonb, s.options, 'scheduled', 'pending', true, statement_timestamp()
  FROM unnest(%(ids)b::uuid[], %(scheduled_fors)b::timestamptz[], %(payloads)b::text[])
       AS f(id, scheduled_for, payload)
  JOIN job_schedules s ON s.id = %(schedule_id)s
ON CONFLICT (schedule_id, scheduled_for) WHERE stage = 'scheduled' DO NOTHING
RETURNING id, scheduled_for;

-- feature_notify_outbox --
-- Wake the running beats and have them sweep the outbox now (pending rows to publish at once: backfill, trigger).
SELECT pg_notify('runledger_schedules', 'outbox');

-- feature_calendar_add --
-- Create a calendar, or add dates to an existing one (dates kept sorted and unique).
INSERT INTO calendars AS c (name, dates)
VALUES (%(name)s, %(dates)s::date[])
ON CONFLICT (name) DO UPDATE
   SET dates = (SELECT array_agg(DISTINCT d ORDER BY d) FROM unnest(c.dates || EXCLUDED.dates) AS u(d)),
       updated_at = now()
RETURNING name, dates, created_at, updated_at;

-- feature_calendar_get --
-- One calendar by name.
SELECT name, dates, created_at, updated_at FROM calendars WHERE name = %(name)s;

-- feature_calendar_list --
-- Every calendar with the names of the schedules using it.
SELECT c.name, c.dates, c.created_at, c.updated_at,
       coalesce((SELECT array_agg(s.name ORDER BY s.name) FROM job_schedules s WHERE s.calendar = c.name),
                '{}') AS schedules
  FROM calendars c
 ORDER BY c.name;

-- feature_calendar_users --
-- The schedules using a calendar.
SELECT name FROM job_schedules WHERE calendar = %(name)s ORDER BY name;

-- feature_calendar_delete --
-- Remove a calendar (the foreign key refuses while schedules use it).
DELETE FROM calendars WHERE name = %(name)s RETURNING name;
