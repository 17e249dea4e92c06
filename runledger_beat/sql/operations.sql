-- Operating it: the beats table, metrics gauges, health and doctor checks.
-- Named statements as in queries.sql (see runledger_beat/queries.py).

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

-- beats_list --
-- Every beat's row with the seconds since its last tick (database clock), freshest first.
SELECT id, host, pid, version, started_at, last_tick_at, preparing,
       extract(epoch FROM statement_timestamp() - last_tick_at)::float8 AS age_seconds
  FROM beats
 ORDER BY last_tick_at DESC, host, pid;

-- beats_freshest --
-- How many beats have a row (on host %(host)s, when given), and the seconds since the freshest one ticked.
SELECT count(*) AS beats,
       extract(epoch FROM statement_timestamp() - max(last_tick_at))::float8 AS age_seconds
  FROM beats
 WHERE %(host)s::text IS NULL OR host = %(host)s::text;

-- metrics_gauges --
-- The metrics gauges in one cheap statement (partial indexes): schedules due now, ledger rows waiting to be
-- published, and quarantined schedules.
SELECT (SELECT count(*) FROM job_schedules WHERE is_active AND next_fire_at <= statement_timestamp()) AS due,
       (SELECT count(*) FROM jobs WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM schedule_faults WHERE quarantined_at IS NOT NULL) AS quarantined;

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

-- doctor_schema --
-- runledger-beat doctor: does the schema exist, may this role use it, and does it hold the migrations table.
SELECT n.oid IS NOT NULL AS present,
       CASE WHEN n.oid IS NOT NULL THEN has_schema_privilege(n.oid, 'USAGE') END AS usage,
       EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid AND c.relname = 'schema_migrations')
           AS migrations_table
  FROM (SELECT %(schema)s::text AS name) s
  LEFT JOIN pg_namespace n ON n.nspname = s.name;

-- doctor_privileges --
-- runledger-beat doctor: for each of %(tables)s in the schema, whether it exists and what this role may do with it.
SELECT t.name, c.oid IS NOT NULL AS present,
       CASE WHEN c.oid IS NOT NULL THEN has_table_privilege(c.oid, 'SELECT') END AS can_select,
       CASE WHEN c.oid IS NOT NULL THEN has_table_privilege(c.oid, 'INSERT') END AS can_insert,
       CASE WHEN c.oid IS NOT NULL THEN has_table_privilege(c.oid, 'UPDATE') END AS can_update,
       CASE WHEN c.oid IS NOT NULL THEN has_table_privilege(c.oid, 'DELETE') END AS can_delete
  FROM unnest(%(tables)s::text[]) WITH ORDINALITY AS t(name, n)
  LEFT JOIN pg_class c
         ON c.relname = t.name AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %(schema)s)
 ORDER BY t.n;

-- doctor_functions --
-- runledger-beat doctor: for each of %(signatures)s (functions of the schema), whether it exists and this role may call it.
SELECT f.signature, p.oid IS NOT NULL AS present,
       CASE WHEN p.oid IS NOT NULL THEN has_function_privilege(p.oid, 'EXECUTE') END AS can_execute
  FROM unnest(%(signatures)s::text[]) WITH ORDINALITY AS f(signature, n)
  LEFT JOIN pg_proc p ON p.oid = to_regprocedure(quote_ident(%(schema)s) || '.' || f.signature)
 ORDER BY f.n;

-- doctor_clock --
-- runledger-beat doctor: the database clock (compared with this host's).
SELECT clock_timestamp() AS now;

-- doctor_listen --
-- runledger-beat doctor: listen on a channel of its own (LISTEN/NOTIFY wakes beats; a transaction pooler breaks it).
LISTEN runledger_doctor;

-- doctor_notify --
-- runledger-beat doctor: notify its own channel, to see the notification come back.
SELECT pg_notify('runledger_doctor', %(token)s);

-- doctor_unlisten --
-- runledger-beat doctor: stop listening.
UNLISTEN runledger_doctor;

-- doctor_recent_start --
-- runledger-beat doctor: the latest run a worker hook reported started within the last hour (NULL: none).
SELECT max(started_at) AS started_at FROM jobs WHERE started_at >= now() - interval '1 hour';

-- web_last_fires --
-- The dashboard's schedules page: each schedule's latest ledger row (status, and the lag sent_at - scheduled_for).
SELECT s.id AS schedule_id, j.status, j.stage, j.scheduled_for, j.sent_at,
       extract(epoch FROM j.sent_at - j.scheduled_for)::float8 AS lag_seconds
  FROM job_schedules s
 CROSS JOIN LATERAL (SELECT status, stage, scheduled_for, sent_at FROM jobs
                      WHERE schedule_id = s.id ORDER BY created_at DESC LIMIT 1) j;

-- web_lag_series --
-- The dashboard's lag plot: sent_at - scheduled_for of a schedule's last %(limit)s sent fires, oldest first.
SELECT scheduled_for, extract(epoch FROM sent_at - scheduled_for)::float8 AS lag_seconds
  FROM (SELECT scheduled_for, sent_at, created_at FROM jobs
         WHERE schedule_id = %(id)s AND stage = 'scheduled' AND sent_at IS NOT NULL
         ORDER BY created_at DESC LIMIT %(limit)s) t
 ORDER BY scheduled_for, created_at;

-- web_faulted_schedules --
-- The dashboard's problems page: schedules beat could not fire (a row in schedule_faults), quarantined first.
SELECT s.name, s.job_type, s.is_active, f.failures, f.last_error, f.failed_at, f.retry_at, f.quarantined_at
  FROM schedule_faults f JOIN job_schedules s ON s.id = f.schedule_id
 ORDER BY f.quarantined_at DESC NULLS LAST, f.failed_at DESC, s.name;

-- web_failed_jobs --
-- The dashboard's problems page: the newest %(limit)s ledger rows that failed to publish, were lost or expired.
SELECT id, schedule_name, job_type, stage, status, scheduled_for, created_at, sent_at, dispatch_attempts,
       last_error, worker
  FROM jobs
 WHERE status IN ('failed', 'lost', 'expired')
 ORDER BY created_at DESC, id
 LIMIT %(limit)s;

-- maintain_ledger --
-- Day partitions of the ledger created ahead, those past %(retention)s s dropped (NULL: none), the default
-- partition's old rows deleted in batches; see runledger_maintain_ledger() in migration 0006.
SELECT action, partition_name
  FROM runledger_maintain_ledger(make_interval(secs => %(retention)s::float8), %(days_ahead)s);

-- ledger_partitions --
-- The ledger's partitions: name, the range it holds, estimated rows and bytes on disk, oldest first.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS holds,
       greatest(c.reltuples, 0)::bigint AS rows_estimate, pg_total_relation_size(c.oid) AS bytes
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'jobs'::regclass
 ORDER BY pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.relname;
