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
