-- What a beat runs: claim, record and advance (beat/claim.py), publish and settle the outbox, sweep and
-- keep house (beat/*.py), and the testing helper's pass at a chosen clock (testing.py), through db.beat_store.
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME; the stores run them with every runledger name schema-qualified (queries.for_schema).

-- mark_internal --
-- Beat's own cursor moves must not wake the other beats; also reads the database clock.
SELECT set_config('runledger.internal', 'on', true), clock_timestamp() AS db_clock;

-- set_local_timeouts --
-- Behind a transaction pooler a connection carries no session settings: a claims transaction sets its statement,
-- lock and idle-in-transaction timeouts for itself (milliseconds), so a frozen beat still lets go of its rows.
SELECT set_config('statement_timeout', %(statement)s, true), set_config('lock_timeout', %(lock)s, true),
       set_config('idle_in_transaction_session_timeout', %(idle)s, true);

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
-- The earliest claimable cursor is read in index order (job_schedules_due_idx), skipping faulted rows as it goes:
-- min() over an anti-join would scan every active schedule each tick.
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
                           (SELECT f.next_fire_at FROM job_schedules f
                             WHERE f.is_active AND f.next_fire_at IS NOT NULL
                               AND NOT EXISTS (SELECT 1 FROM schedule_faults g
                                                WHERE g.schedule_id = f.id
                                                  AND (g.quarantined_at IS NOT NULL
                                                       OR g.retry_at > statement_timestamp()))
                             ORDER BY f.next_fire_at LIMIT 1))
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

-- next_due_in --
-- Seconds from the database clock until the earliest claimable cursor is %(lookahead)s seconds away, or until a faulted
-- schedule's retry (NULL when neither). The earliest cursor in index order, as in claim_due_schedules.
SELECT extract(epoch FROM (least(
         (SELECT s.next_fire_at FROM job_schedules s
           WHERE s.is_active AND s.next_fire_at IS NOT NULL
             AND NOT EXISTS (SELECT 1 FROM schedule_faults q
                              WHERE q.schedule_id = s.id
                                AND (q.quarantined_at IS NOT NULL OR q.retry_at > statement_timestamp()))
           ORDER BY s.next_fire_at LIMIT 1),
         (SELECT min(q.retry_at) + make_interval(secs => %(lookahead)s) FROM schedule_faults q
           WHERE q.quarantined_at IS NULL AND q.retry_at > statement_timestamp()))
       - statement_timestamp()))::float8 - %(lookahead)s::float8 AS seconds;

-- next_instant_size --
-- How many active schedules share the earliest claimable instant (within %(group_window)s s of it), counted up to
-- %(cap)s: beat starts preparing an instant that many fires long early enough to be ready at it.
SELECT count(*)::int AS n
  FROM (SELECT 1 FROM job_schedules s
         WHERE s.is_active
           AND s.next_fire_at <= (SELECT f.next_fire_at FROM job_schedules f
                                   WHERE f.is_active AND f.next_fire_at IS NOT NULL
                                     AND NOT EXISTS (SELECT 1 FROM schedule_faults q
                                                      WHERE q.schedule_id = f.id
                                                        AND (q.quarantined_at IS NOT NULL
                                                             OR q.retry_at > statement_timestamp()))
                                   ORDER BY f.next_fire_at LIMIT 1)
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

-- claim_backlog --
-- A beat's own fires a broker outage stopped, locked for it to publish again (in a transaction kept until they are
-- marked sent): a row another beat's recovery sweep holds, or already published, is left out, so none goes out twice.
SELECT id FROM jobs WHERE id = ANY(%(ids)b::uuid[]) AND status = 'pending' FOR UPDATE SKIP LOCKED;

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

-- read_kept_by_id --
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

-- feature_prune_audit --
-- Delete audit entries older than %(older_than)s seconds (the ledger's retention applies to the log too).
DELETE FROM schedule_changes WHERE at < now() - make_interval(secs => %(older_than)s::float8);

-- maintain_ledger --
-- Day partitions of the ledger created ahead, those past %(retention)s s dropped (NULL: none), the default
-- partition's old rows deleted in batches; see runledger_maintain_ledger() in migration 0006.
SELECT action, partition_name
  FROM runledger_maintain_ledger(make_interval(secs => %(retention)s::float8), %(days_ahead)s);

-- beat_tick --
-- A beat is alive: upsert its row (the database clock stamps the tick) and prune rows of beats silent for %(stale)s s.
WITH pruned AS (
    DELETE FROM beats
     WHERE last_tick_at < statement_timestamp() - make_interval(secs => %(stale)s::float8) AND id <> %(id)s
)
INSERT INTO beats (id, host, pid, version, started_at, last_tick_at, preparing)
VALUES (%(id)s, %(host)s, %(pid)s, %(version)s, statement_timestamp(), statement_timestamp(), %(preparing)s)
ON CONFLICT (id) DO UPDATE
   SET last_tick_at = excluded.last_tick_at, preparing = excluded.preparing;

-- beat_remove --
-- A beat shut down cleanly: drop its row.
DELETE FROM beats WHERE id = %(id)s;

-- metrics_gauges --
-- The metrics gauges in one cheap statement (partial indexes): schedules due now, ledger rows waiting to be
-- published, and quarantined schedules.
SELECT (SELECT count(*) FROM job_schedules WHERE is_active AND next_fire_at <= statement_timestamp()) AS due,
       (SELECT count(*) FROM jobs WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM schedule_faults WHERE quarantined_at IS NOT NULL) AS quarantined;

-- listen_schedules --
-- Wake on changes to schedules (the notify trigger of 0001) and on outbox work (backfill, trigger).
LISTEN runledger_schedules;

-- testing_claim_due_at --
-- runledger_beat.testing.run_due: lock up to %(limit)s schedules due by %(at)s, as if the database clock read
-- %(at)s (it is returned as db_now, which planning judges by); rows another session holds are skipped.
SELECT s.id, s.name, s.job_type, s.organization_id, s.payload_template, s.kind,
       s.cron_expr, s.cron_day_and, s.interval_seconds, s.run_at, s.anchor_at,
       s.timezone, s.next_fire_at, s.max_jitter_seconds, s.options,
       s.misfire_policy, s.misfire_grace_seconds, s.overlap_policy,
       s.start_at, s.end_at,
       %(at)s::timestamptz AS db_now
  FROM job_schedules s
 WHERE s.is_active AND s.next_fire_at <= %(at)s::timestamptz
 ORDER BY s.next_fire_at
 LIMIT %(limit)s
   FOR UPDATE OF s SKIP LOCKED;

-- testing_jobs --
-- runledger_beat.testing.run_due: the ledger rows of these (schedule, slot) pairs, in slot order.
SELECT j.* FROM jobs j
  JOIN unnest(%(schedule_ids)b::uuid[], %(scheduled_fors)b::timestamptz[]) AS p(schedule_id, scheduled_for)
    ON j.schedule_id = p.schedule_id AND j.scheduled_for = p.scheduled_for AND j.stage = 'scheduled'
 ORDER BY j.scheduled_for, j.schedule_name, j.id;
