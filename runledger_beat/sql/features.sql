-- Schedule features (issue 14): pause notes, the audit log, backfill, skip dates and calendars,
-- and the buffer_one / cancel_other overlap policies. Named statements, run only through store.Store.

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

-- feature_prune_audit --
-- Delete audit entries older than %(older_than)s seconds (the ledger's retention applies to the log too).
DELETE FROM schedule_changes WHERE at < now() - make_interval(secs => %(older_than)s::float8);

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
