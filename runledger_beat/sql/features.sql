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

-- overlap_buffer_fires --
-- Just before commit, for fires of buffer_one schedules: while an earlier run is live (or a fire already waits),
-- the first later fire waits as 'buffered' and any further one is 'skipped'. Returns the fires held back.
WITH d AS (
    SELECT f.id,
           EXISTS (SELECT 1 FROM jobs b
                    WHERE b.schedule_id = f.schedule_id AND b.status = 'buffered' AND b.id <> f.id) AS waiting,
           EXISTS (SELECT 1 FROM jobs p
                    WHERE p.schedule_id = f.schedule_id AND p.id <> f.id
                      AND (p.stage = 'manual' OR p.scheduled_for < f.scheduled_for)
                      AND p.status IN ('pending', 'sent', 'received', 'started', 'retry')) AS live
      FROM jobs f
     WHERE f.id = ANY(%(ids)b::uuid[]) AND f.status = 'pending'  -- just recorded: jobs_pending_idx
)
UPDATE jobs f
   SET status = CASE WHEN d.waiting THEN 'skipped' ELSE 'buffered' END,
       finished_at = CASE WHEN d.waiting THEN statement_timestamp() END,
       last_error = CASE WHEN d.waiting THEN 'overlap: a later fire is already waiting (buffer_one)'
                         ELSE 'overlap: waiting for the live run to finish (buffer_one)' END
  FROM d
 WHERE f.id = d.id AND (d.live OR d.waiting)
RETURNING f.id;

-- overlap_release_buffered --
-- A buffered fire whose schedule has no live run any more becomes pending with released_at set, so the caller
-- publishes it (the worker hook), else the recovery sweep does at once. With %(job_id)s only the schedule of that
-- finished run of task %(task)s; NULL: every schedule (the sweep). The earliest buffered fire of a schedule goes first.
UPDATE jobs j
   SET status = 'pending', released_at = statement_timestamp(), last_error = NULL
  FROM (SELECT b.id
          FROM jobs b
         WHERE b.status = 'buffered'
           AND (%(job_id)s::uuid IS NULL
                OR b.schedule_id = (SELECT r.schedule_id FROM jobs r
                                     WHERE r.id = %(job_id)s::uuid AND r.job_type = %(task)s::text))
           AND NOT EXISTS (SELECT 1 FROM jobs p
                            WHERE p.schedule_id = b.schedule_id
                              AND p.status IN ('pending', 'sent', 'received', 'started', 'retry'))
           AND NOT EXISTS (SELECT 1 FROM jobs e
                            WHERE e.schedule_id = b.schedule_id AND e.status = 'buffered'
                              AND e.scheduled_for < b.scheduled_for)
         LIMIT %(limit)s
           FOR UPDATE SKIP LOCKED) n
 WHERE j.id = n.id AND j.status = 'buffered'
RETURNING j.id, j.job_type, j.payload, j.options, j.schedule_id, j.schedule_name, j.scheduled_for;

-- overlap_cancel_runs --
-- Just before commit, for fires of cancel_other schedules: the schedule's earlier live runs not yet started (and
-- started ones when overlap_terminate is on) become revoked; returned, with the flag, for app.control.revoke.
UPDATE jobs p
   SET status = 'revoked', finished_at = statement_timestamp(),
       last_error = 'overlap: cancelled by a later fire (cancel_other)'
  FROM jobs f JOIN job_schedules s ON s.id = f.schedule_id
 WHERE f.id = ANY(%(ids)b::uuid[]) AND f.status = 'pending'  -- just recorded: jobs_pending_idx
   AND p.schedule_id = f.schedule_id AND p.id <> f.id
   AND (p.stage = 'manual' OR p.scheduled_for < f.scheduled_for)
   AND (p.status IN ('pending', 'sent', 'received', 'retry') OR (p.status = 'started' AND s.overlap_terminate))
RETURNING p.id, s.overlap_terminate AS terminate;

-- feature_notify_outbox --
-- Wake the running beats and have them sweep the outbox now (pending rows to publish at once: backfill, trigger).
SELECT pg_notify('runledger_schedules', 'outbox');
