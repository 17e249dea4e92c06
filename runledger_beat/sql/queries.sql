-- Every SQL statement runledger_beat runs, by name. Python refers to them as
-- queries.NAME (runledger_beat/queries.py). The line after the name says what
-- the statement is for. All run with search_path set to the runledger schema.

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

-- mark_internal --
-- Beat's own cursor moves must not wake the other beats; also reads the database clock.
SELECT set_config('runledger.internal', 'on', true), clock_timestamp() AS db_clock;

-- stretch_idle_timeout --
-- A prepared transaction stretched for a big instant stays idle longer than the connection's lookahead-based
-- idle_in_transaction_session_timeout allows: raise it for this transaction only (milliseconds).
SELECT set_config('idle_in_transaction_session_timeout', %(ms)s, true) AS ms;

-- try_prepare_lock --
-- One beat of a schema at a time prepares an instant ahead (held until that transaction ends); the
-- others claim only rows already due. One publisher per instant: the broker ingests a burst fastest so.
SELECT pg_try_advisory_xact_lock(hashtextextended('runledger_beat.prepare.' || current_schema(), 0)) AS ok;

-- claim_due_schedules --
-- Lock up to %(limit)s schedules due by the horizon (database clock), oldest first; rows another beat holds are skipped,
-- and so are faulted schedules until their retry (quarantined ones for good).
-- The horizon is the statement time plus %(lookahead)s seconds, cut to %(group_window)s seconds after the first
-- pending instant (%(group_start)s, else the earliest claimable cursor), so one transaction prepares one instant.
-- Rows already due are always taken. Statement time, not now(): the transaction may have begun earlier.
-- Instants Python cannot hold (old rows) come back NULL, the first such column named in bad_instant.
SELECT s.id, s.name, s.job_type, s.organization_id, s.payload_template, s.kind,
       s.cron_expr, s.cron_day_and, s.interval_seconds, s.timezone, s.max_jitter_seconds, s.options,
       s.misfire_policy, s.misfire_grace_seconds, s.overlap_policy,
       CASE WHEN runledger_instant_ok(s.next_fire_at) THEN s.next_fire_at END AS next_fire_at,
       CASE WHEN runledger_instant_ok(s.run_at) THEN s.run_at END AS run_at,
       CASE WHEN runledger_instant_ok(s.anchor_at) THEN s.anchor_at END AS anchor_at,
       CASE WHEN runledger_instant_ok(s.start_at) THEN s.start_at END AS start_at,
       CASE WHEN runledger_instant_ok(s.end_at) THEN s.end_at END AS end_at,
       CASE WHEN runledger_instant_ok(s.last_fired_at) THEN s.last_fired_at END AS last_fired_at,
       CASE WHEN NOT runledger_instant_ok(s.next_fire_at) THEN 'next_fire_at'
            WHEN NOT runledger_instant_ok(s.run_at) THEN 'run_at'
            WHEN NOT runledger_instant_ok(s.anchor_at) THEN 'anchor_at'
            WHEN NOT runledger_instant_ok(s.start_at) THEN 'start_at'
            WHEN NOT runledger_instant_ok(s.end_at) THEN 'end_at'
            WHEN NOT runledger_instant_ok(s.last_fired_at) THEN 'last_fired_at' END AS bad_instant,
       coalesce(q.failures, 0) AS failures, s.skip_dates, s.overlap_terminate,
       CASE WHEN s.calendar IS NOT NULL THEN (SELECT c.dates FROM calendars c WHERE c.name = s.calendar)
       END AS calendar_dates,
       statement_timestamp() AS db_now
  FROM job_schedules s
  LEFT JOIN schedule_faults q ON q.schedule_id = s.id
 WHERE s.is_active
   AND (q.schedule_id IS NULL OR (q.quarantined_at IS NULL AND q.retry_at <= statement_timestamp()))
   AND s.next_fire_at <= least(
         statement_timestamp() + make_interval(secs => %(lookahead)s),
         greatest(statement_timestamp(),
                  coalesce(%(group_start)s::timestamptz,
                           (SELECT min(f.next_fire_at) FROM job_schedules f
                             WHERE f.is_active
                               AND NOT EXISTS (SELECT 1 FROM schedule_faults g
                                                WHERE g.schedule_id = f.id
                                                  AND (g.quarantined_at IS NOT NULL
                                                       OR g.retry_at > statement_timestamp()))))
                  + make_interval(secs => %(group_window)s)))
 ORDER BY s.next_fire_at
 LIMIT %(limit)s
   FOR UPDATE OF s SKIP LOCKED;

-- insert_fires --
-- Record a batch of fires as ledger rows; a slot already recorded is left alone. Parameters travel in binary.
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type,
                  organization_id, payload, options, stage, status, last_error, created_at, finished_at)
SELECT f.id, s.id, s.name, f.scheduled_for, s.job_type,
       s.organization_id, f.payload::jsonb, s.options, 'scheduled', f.status, f.note, statement_timestamp(),
       CASE WHEN f.status = 'skipped' THEN statement_timestamp() END
  FROM unnest(%(ids)b::uuid[], %(schedule_ids)b::uuid[],
              %(scheduled_fors)b::timestamptz[], %(payloads)b::text[],
              %(statuses)b::text[], %(notes)b::text[])
       AS f(id, schedule_id, scheduled_for, payload, status, note)
  JOIN job_schedules s ON s.id = f.schedule_id
ON CONFLICT (schedule_id, scheduled_for) WHERE stage = 'scheduled' DO NOTHING
RETURNING id;

-- advance_cursors_as_beat --
-- Move each claimed schedule's cursor through runledger_advance_cursors() (migration 0008): advance_cursors's
-- UPDATE with the owner's rights, which the audit trigger tells apart as beat's own and does not log.
SELECT runledger_advance_cursors(%(ids)b::uuid[], %(next_fire_ats)b::timestamptz[], %(fired)b::boolean[]) AS moved;

-- cursor_function --
-- Whether runledger_advance_cursors() exists in the schema, and whether this role may call it.
SELECT f IS NOT NULL AS present, coalesce(has_function_privilege(f, 'EXECUTE'), false) AS allowed
  FROM to_regprocedure('runledger_advance_cursors(uuid[], timestamptz[], boolean[])') AS f;

-- advance_cursors --
-- Move each claimed schedule's cursor; a schedule with no next fire is deactivated. A fire recorded ahead
-- counts as fired at its instant (s.next_fire_at here is the slot just recorded). For a role that may not call
-- runledger_advance_cursors(): the audit log records these moves as changes.
UPDATE job_schedules s
   SET next_fire_at  = u.next_fire_at,
       last_fired_at = CASE WHEN u.fired THEN greatest(statement_timestamp(), s.next_fire_at)
                            ELSE s.last_fired_at END,
       is_active     = u.next_fire_at IS NOT NULL,
       updated_at    = statement_timestamp()
  FROM unnest(%(ids)b::uuid[], %(next_fire_ats)b::timestamptz[], %(fired)b::boolean[])
       AS u(id, next_fire_at, fired)
 WHERE s.id = u.id;

-- existing_schedules --
-- Which of these schedules still exist (to name the one that vanished mid-batch).
SELECT id FROM job_schedules WHERE id = ANY(%(ids)b::uuid[]);

-- skip_overlapping_fires --
-- Just before commit: fires of overlap-skip schedules whose previous run is still queued or running are skipped.
-- A later slot recorded in the same transaction is not a previous run.
UPDATE jobs f
   SET status = 'skipped', finished_at = statement_timestamp(),
       last_error = 'overlap: previous run still queued or running'
 WHERE f.id = ANY(%(ids)b::uuid[]) AND f.status = 'pending'  -- just recorded: jobs_pending_idx
   AND EXISTS (SELECT 1 FROM jobs p
                WHERE p.schedule_id = f.schedule_id AND p.id <> f.id
                  AND (p.stage = 'manual' OR p.scheduled_for < f.scheduled_for)
                  AND p.status IN ('pending', 'sent', 'received', 'started', 'retry'))  -- jobs_live_idx
RETURNING f.id;

-- record_schedule_fault --
-- A schedule failed to be read, planned or recorded: count it, keep the error, retry after %(delay)s s doubled per
-- earlier failure (at most %(max_delay)s s); quarantine it at %(quarantine_after)s failures. The schedule row is not written.
INSERT INTO schedule_faults AS q (schedule_id, failures, last_error, failed_at, retry_at, quarantined_at)
SELECT s.id, 1, %(error)s, statement_timestamp(), statement_timestamp() + make_interval(secs => %(delay)s),
       CASE WHEN %(quarantine_after)s <= 1 THEN statement_timestamp() END
  FROM job_schedules s WHERE s.id = %(id)s
ON CONFLICT (schedule_id) DO UPDATE
   SET failures = q.failures + 1, last_error = excluded.last_error, failed_at = excluded.failed_at,
       retry_at = statement_timestamp()
                  + make_interval(secs => least(%(delay)s * power(2, q.failures), %(max_delay)s)),
       quarantined_at = CASE WHEN q.failures + 1 >= %(quarantine_after)s THEN statement_timestamp() END
RETURNING failures, retry_at, quarantined_at;

-- clear_schedule_faults --
-- These schedules fired (or were resumed): their failures are forgiven.
DELETE FROM schedule_faults WHERE schedule_id = ANY(%(ids)b::uuid[]);

-- quarantined_count --
-- How many schedules are quarantined.
SELECT count(*) AS n FROM schedule_faults WHERE quarantined_at IS NOT NULL;

-- next_due_in --
-- Seconds from the database clock until the earliest claimable cursor is %(lookahead)s seconds away, or until a faulted
-- schedule's retry (NULL when neither).
SELECT extract(epoch FROM (least(
         (SELECT min(s.next_fire_at) FROM job_schedules s
           WHERE s.is_active
             AND NOT EXISTS (SELECT 1 FROM schedule_faults q
                              WHERE q.schedule_id = s.id
                                AND (q.quarantined_at IS NOT NULL OR q.retry_at > statement_timestamp()))),
         (SELECT min(q.retry_at) + make_interval(secs => %(lookahead)s) FROM schedule_faults q
           WHERE q.quarantined_at IS NULL AND q.retry_at > statement_timestamp()))
       - statement_timestamp()))::float8 - %(lookahead)s::float8 AS seconds;

-- next_instant_size --
-- How many active schedules share the earliest claimable instant (within %(group_window)s s of it), counted up to
-- %(cap)s: beat starts preparing an instant that many fires long early enough to be ready at it.
SELECT count(*)::int AS n
  FROM (SELECT 1 FROM job_schedules s
         WHERE s.is_active
           AND s.next_fire_at <= (SELECT min(f.next_fire_at) FROM job_schedules f
                                   WHERE f.is_active
                                     AND NOT EXISTS (SELECT 1 FROM schedule_faults q
                                                      WHERE q.schedule_id = f.id
                                                        AND (q.quarantined_at IS NOT NULL
                                                             OR q.retry_at > statement_timestamp())))
                                 + make_interval(secs => %(group_window)s)
         LIMIT %(cap)s) AS due;

-- mark_sent --
-- Fires handed to the broker; a row a worker already moved on is left alone.
UPDATE jobs
   SET status = 'sent', sent_at = statement_timestamp(),
       dispatch_attempts = dispatch_attempts + 1, last_error = NULL
 WHERE id = ANY(%(ids)b::uuid[]) AND status = 'pending';

-- mark_publish_failed --
-- The broker refused these fires or their message could not be built: count the attempt and keep the error; the row
-- stays pending for the sweep, or becomes failed (dead-lettered) at %(max_attempts)s attempts.
UPDATE jobs
   SET dispatch_attempts = dispatch_attempts + 1, last_error = %(error)s, last_attempt_at = statement_timestamp(),
       status = CASE WHEN dispatch_attempts + 1 >= %(max_attempts)s THEN 'failed' ELSE status END,
       finished_at = CASE WHEN dispatch_attempts + 1 >= %(max_attempts)s THEN statement_timestamp() END
 WHERE id = ANY(%(ids)b::uuid[]) AND status = 'pending'
RETURNING id, status;

-- note_publish_outage --
-- The broker was unreachable for these fires: keep the reason, count no attempt (an outage never dead-letters a fire).
UPDATE jobs
   SET last_error = %(error)s
 WHERE id = ANY(%(ids)b::uuid[]) AND status = 'pending';

-- hold_publishing --
-- A beat publishing an instant bigger than it holds keeps this shared lock (session-level, on its ledger connection)
-- from the commit until the instant's marks are written: the rows are committed 'pending' meanwhile, and a recovery
-- sweep of another beat must not take them for abandoned once past the grace (they would go out twice). A crashed
-- beat's session ends and so does the lock. False only while a sweep holds sweep_lock: that sweep's rows are older.
SELECT pg_try_advisory_lock_shared(hashtextextended('runledger_beat.publishing.' || current_schema(), 0)) AS held;

-- release_publishing --
SELECT pg_advisory_unlock_shared(hashtextextended('runledger_beat.publishing.' || current_schema(), 0)) AS released;

-- sweep_lock --
-- Inside a recovery sweep's transaction: false while any beat publishes a big instant (hold_publishing); the sweep
-- then takes only rows far past the grace (a beat frozen mid-publish holds the lock, and must not hold recovery).
SELECT pg_try_advisory_xact_lock(hashtextextended('runledger_beat.publishing.' || current_schema(), 0)) AS free;

-- claim_pending_jobs --
-- Ledger rows still unpublished past the grace after their instant (manual triggers, backfills and released
-- buffered fires at once), locked for one sweeper. A fire whose publish failed waits %(grace)s s doubled per
-- attempt (at most an hour); fewest attempts first, so fires that keep failing never starve newer ones.
SELECT id, job_type, payload, options, schedule_id, schedule_name, scheduled_for
  FROM jobs
 WHERE status = 'pending'
   AND (stage = 'manual' OR backfill OR released_at IS NOT NULL
        OR greatest(created_at, scheduled_for) < statement_timestamp() - make_interval(secs => %(grace)s))
   AND (last_attempt_at IS NULL
        OR last_attempt_at < statement_timestamp()
                             - make_interval(secs => least(%(grace)s * power(2, dispatch_attempts - 1), 3600)))
 ORDER BY dispatch_attempts, created_at
 LIMIT %(limit)s
   FOR UPDATE SKIP LOCKED;

-- read_spilled --
-- Fires a beat recorded ahead of their instant without keeping them in memory (an instant bigger than it holds),
-- read back once their transaction committed. Those an overlap policy held back at the commit are no longer
-- pending. The instant's range keeps the id lookups to its day's partition. Empty options come back as NULL:
-- nothing to decode. The columns are in the order of a Fire's fields.
SELECT id, schedule_id, schedule_name, job_type, payload, nullif(options, '{}'::jsonb) AS options,
       scheduled_for
  FROM jobs
 WHERE id = ANY(%(ids)b::uuid[])
   AND scheduled_for BETWEEN %(first)s AND %(last)s
   AND status = 'pending';

-- resolve_stale_sent --
-- Sent fires that will never start: past their message's expiry (counted from the instant) they are expired; when a
-- worker with the ledger hook reported within the hour, a fire sent more than %(lost_after)s s ago without a start is
-- lost. Either way the schedule's overlap policy stops waiting for it. One pass over the sent rows (jobs_sent_idx).
UPDATE jobs
   SET status = CASE WHEN runledger_sent_expired(options, scheduled_for, sent_at) THEN 'expired' ELSE 'lost' END,
       finished_at = statement_timestamp(),
       last_error = coalesce(last_error,
                             CASE WHEN runledger_sent_expired(options, scheduled_for, sent_at)
                                  THEN 'runledger: message expired before a worker took it'
                                  ELSE 'runledger: sent but never started; marked lost' END)
 WHERE status = 'sent'
   AND (runledger_sent_expired(options, scheduled_for, sent_at)
        OR (sent_at < statement_timestamp() - make_interval(secs => %(lost_after)s)
            AND EXISTS (SELECT 1 FROM workers w WHERE w.seen_at > statement_timestamp() - interval '1 hour')))
RETURNING id, status;

-- unresolved_sent_without_hook --
-- Fires sent more than %(older_than)s s ago that no worker started, when no worker with the ledger hook reported
-- within the hour (beat warns: install runledger_beat.install(app) in the workers).
SELECT count(*) AS n
  FROM jobs
 WHERE status = 'sent' AND sent_at < statement_timestamp() - make_interval(secs => %(older_than)s)
   AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.seen_at > statement_timestamp() - interval '1 hour');

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
-- The latest ledger rows of a schedule, newest first, optionally of one status.
SELECT * FROM jobs
 WHERE schedule_name = %(name)s
   AND (%(status)s::text IS NULL OR status = %(status)s::text)
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

-- worker_claim_job --
-- A worker starts a run: atomically move a not-yet-started ledger row to started (the duplicate guard). A row marked
-- lost while its message waited in a long queue starts all the same. Every worker statement matches the row by id
-- and task name (job_type): a message of another task that names the row's id changes nothing.
UPDATE jobs
   SET status = 'started', started_at = now(), worker = %(worker)s,
       retries = GREATEST(retries, %(retries)s), finished_at = NULL
 WHERE id = %(id)s AND job_type = %(task)s
   AND (status IN ('pending', 'sent', 'retry') OR (status = 'lost' AND started_at IS NULL))
RETURNING id;

-- worker_seen --
-- A worker with the ledger hook reports itself (at start, then at most once a minute).
INSERT INTO workers (hostname, pid, seen_at) VALUES (%(hostname)s, %(pid)s, now())
ON CONFLICT (hostname) DO UPDATE SET pid = excluded.pid, seen_at = excluded.seen_at;

-- worker_count_duplicate --
-- A delivery of a run already started or finished: count it; no row returned means no ledger row.
UPDATE jobs
   SET duplicates = duplicates + 1
 WHERE id = %(id)s AND job_type = %(task)s
RETURNING status;

-- worker_mark_retry --
-- A run asked to retry: count it and keep the reason, unless the retried attempt already started or it finished.
UPDATE jobs
   SET status = CASE WHEN retries < %(retries)s THEN 'retry' ELSE status END,
       retries = GREATEST(retries, %(retries)s),
       last_error = %(error)s
 WHERE id = %(id)s AND job_type = %(task)s AND status IN ('pending', 'sent', 'started', 'retry');

-- worker_mark_success --
-- A run finished successfully (a retry's reason stays in last_error).
UPDATE jobs
   SET status = 'success', finished_at = now()
 WHERE id = %(id)s AND job_type = %(task)s AND status NOT IN ('success', 'failure', 'revoked');

-- worker_mark_failure --
-- A run failed: keep the exception type and message.
UPDATE jobs
   SET status = 'failure', finished_at = now(), last_error = %(error)s
 WHERE id = %(id)s AND job_type = %(task)s AND status NOT IN ('success', 'failure', 'revoked');

-- worker_mark_revoked --
-- A run was revoked (or expired) before or while running.
UPDATE jobs
   SET status = 'revoked', finished_at = now(), last_error = coalesce(%(error)s, last_error)
 WHERE id = %(id)s AND job_type = %(task)s AND status NOT IN ('success', 'failure', 'revoked');

-- mark_lost_runs --
-- Started runs older than their time_limit option (else %(default_bound)s seconds) become lost.
UPDATE jobs
   SET status = 'lost', finished_at = now(),
       last_error = coalesce(last_error, 'runledger: no finish reported in time; marked lost')
 WHERE status = 'started'
   AND started_at < now() - make_interval(secs => coalesce(
           CASE WHEN options->>'time_limit' ~ '^[0-9]+(\.[0-9]+)?$' THEN (options->>'time_limit')::float8 END,
           %(default_bound)s::float8))
RETURNING id;

-- job_stats --
-- Per schedule: counts by status and lag percentiles (seconds) from scheduled_for to sent_at and started_at.
WITH j AS (
    SELECT schedule_name, status, scheduled_for, sent_at, started_at
      FROM jobs
     WHERE (%(name)s::text IS NULL OR schedule_name = %(name)s::text)
       AND (%(since)s::float8 IS NULL
            OR coalesce(scheduled_for, created_at) >= now() - make_interval(secs => %(since)s::float8))
), c AS (
    SELECT schedule_name, jsonb_object_agg(status, n) AS counts
      FROM (SELECT schedule_name, status, count(*) AS n FROM j GROUP BY schedule_name, status) x
     GROUP BY schedule_name
)
SELECT j.schedule_name AS name, count(*) AS total, c.counts,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_p99,
       max(extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_max,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_p50,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_p99,
       max(extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_max
  FROM j LEFT JOIN c ON c.schedule_name IS NOT DISTINCT FROM j.schedule_name
 GROUP BY j.schedule_name, c.counts
 ORDER BY j.schedule_name NULLS LAST;

-- demo_create_runs_table --
-- The demo's record of executions (the demo task writes one row per run).
CREATE TABLE IF NOT EXISTS demo_runs (task_id text, who text, scheduled_for text, worker text,
                                      at timestamptz DEFAULT clock_timestamp());

-- demo_insert_schedule --
-- A demo schedule at second resolution, first due two seconds from now.
INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, max_jitter_seconds, next_fire_at)
VALUES (%(id)s, %(name)s, 'demo.hello', %(template)s, 'cron', %(cron)s, %(jitter)s,
        date_trunc('second', now()) + interval '2 seconds')
ON CONFLICT (name) DO NOTHING;

-- demo_record_run --
-- The demo task ran (called from the demo worker).
INSERT INTO demo_runs (task_id, who, scheduled_for, worker) VALUES (%(task_id)s, %(who)s, %(scheduled_for)s, %(worker)s);

-- demo_progress --
-- Every fire with when it was sent and when and where it ran, in slot order.
SELECT j.id::text AS id, j.schedule_name, j.scheduled_for, j.sent_at, r.at AS ran_at, r.worker
  FROM jobs j LEFT JOIN demo_runs r ON r.task_id = j.id::text
 ORDER BY j.scheduled_for;

-- demo_unfinished --
-- Fires sent but not yet run (the demo waits for them before stopping the worker).
SELECT count(*) AS n FROM jobs j LEFT JOIN demo_runs r ON r.task_id = j.id::text
 WHERE j.sent_at IS NOT NULL AND r.task_id IS NULL;

-- demo_summary --
-- Per schedule: fires recorded, sent, executed, and distinct slots.
SELECT j.schedule_name, count(*) AS fires, count(j.sent_at) AS sent, count(r.task_id) AS executed,
       count(DISTINCT j.scheduled_for) AS slots
  FROM jobs j LEFT JOIN demo_runs r ON r.task_id = j.id::text
 GROUP BY 1 ORDER BY 1;

-- listen_schedules --
-- Wake on changes to schedules (the notify trigger of 0001) and on outbox work (backfill, trigger).
LISTEN runledger_schedules;
