-- Operator surfaces (ops/*.py and the command line, through db.ops_store): partitions, beats, health,
-- doctor checks, the dashboard's reads and per-schedule stats.
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME; the stores run them with every runledger name schema-qualified (queries.for_schema).

-- ledger_partitions --
-- The ledger's partitions: name, the range it holds, estimated rows and bytes on disk, oldest first.
SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS holds,
       greatest(c.reltuples, 0)::bigint AS rows_estimate, pg_total_relation_size(c.oid) AS bytes
  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
 WHERE i.inhparent = 'jobs'::regclass
 ORDER BY pg_get_expr(c.relpartbound, c.oid) = 'DEFAULT', c.relname;

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

-- web_schedules_page --
-- One page of schedules by name after %(after)s (keyset), with fault records: of task %(task)s, and matching
-- %(contains)s (ILIKE on name or task: the trigram index) or %(prefix)s (LIKE on lower(name) or lower(task): the
-- prefix indexes), when given. The caller asks for one row more than it shows, to know whether more remain.
SELECT s.*, q.failures, q.last_error, q.retry_at, q.quarantined_at
  FROM job_schedules s LEFT JOIN schedule_faults q ON q.schedule_id = s.id
 WHERE (%(after)s::text IS NULL OR s.name > %(after)s::text)
   AND (%(task)s::text IS NULL OR s.job_type = %(task)s::text)
   AND (%(contains)s::text IS NULL OR s.name ILIKE %(contains)s::text OR s.job_type ILIKE %(contains)s::text)
   AND (%(prefix)s::text IS NULL OR lower(s.name) LIKE %(prefix)s::text OR lower(s.job_type) LIKE %(prefix)s::text)
 ORDER BY s.name
 LIMIT %(limit)s;

-- web_search_mode --
-- How schedules are searched: 'substring' when the trigram index exists (migration 0009), else 'prefix'.
SELECT CASE WHEN to_regclass('job_schedules_search_trgm_idx') IS NOT NULL THEN 'substring' ELSE 'prefix' END
       AS mode;

-- web_schedules_estimate --
-- The planner's estimate of how many schedules there are (no scan: pg_class and the table's size).
EXPLAIN (FORMAT JSON) SELECT 1 FROM job_schedules;

-- web_schedules_count --
-- How many schedules there are, exactly (used only when the estimate says there are few).
SELECT count(*) AS n FROM job_schedules;

-- web_last_fires --
-- The dashboard's schedules page: the latest ledger row (status, and the lag sent_at - scheduled_for) of each
-- schedule in %(ids)s, one index probe each (jobs_schedule_history_idx).
SELECT s.id AS schedule_id, j.status, j.stage, j.scheduled_for, j.sent_at,
       extract(epoch FROM j.sent_at - j.scheduled_for)::float8 AS lag_seconds
  FROM unnest(%(ids)b::uuid[]) AS s(id)
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
-- The dashboard's problems page: the first %(limit)s schedules beat could not fire (a row in schedule_faults),
-- quarantined first.
SELECT s.name, s.job_type, s.is_active, f.failures, f.last_error, f.failed_at, f.retry_at, f.quarantined_at
  FROM schedule_faults f JOIN job_schedules s ON s.id = f.schedule_id
 ORDER BY f.quarantined_at DESC NULLS LAST, f.failed_at DESC, s.name
 LIMIT %(limit)s;

-- web_failed_jobs --
-- The dashboard's problems page: the newest %(limit)s ledger rows that failed to publish, were lost or expired
-- (jobs_problem_idx holds only those rows).
SELECT id, schedule_name, job_type, stage, status, scheduled_for, created_at, sent_at, dispatch_attempts,
       last_error, worker
  FROM jobs
 WHERE status IN ('failed', 'lost', 'expired')
 ORDER BY created_at DESC, id
 LIMIT %(limit)s;

-- job_stats --
-- Per schedule name of one page (after %(after)s, at most %(limit)s; only %(name)s when given): counts by status and
-- lag percentiles (seconds) from scheduled_for to sent_at and started_at. The names are those of the schedules and
-- of removed schedules' ledger rows; each name's rows are read through an index (jobs_schedule_history_idx,
-- jobs_removed_schedule_idx), optionally only those scheduled within %(since)s seconds. A name without rows has
-- total 0.
WITH names AS (
    SELECT name FROM (
        (SELECT name FROM job_schedules
          WHERE (%(name)s::text IS NULL OR name = %(name)s::text)
            AND (%(after)s::text IS NULL OR name > %(after)s::text)
          ORDER BY name LIMIT %(limit)s)
        UNION
        (SELECT DISTINCT schedule_name FROM jobs
          WHERE schedule_id IS NULL AND schedule_name IS NOT NULL
            AND (%(name)s::text IS NULL OR schedule_name = %(name)s::text)
            AND (%(after)s::text IS NULL OR schedule_name > %(after)s::text)
          ORDER BY schedule_name LIMIT %(limit)s)
    ) u
     ORDER BY name
     LIMIT %(limit)s
), page AS (
    SELECT n.name, s.id FROM names n LEFT JOIN job_schedules s ON s.name = n.name
)
SELECT p.name, a.total, c.counts, a.send_lag_p50, a.send_lag_p99, a.send_lag_max,
       a.start_lag_p50, a.start_lag_p99, a.start_lag_max
  FROM page p
 CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_p99,
           max(extract(epoch FROM j.sent_at - j.scheduled_for)::float8) AS send_lag_max,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_p50,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_p99,
           max(extract(epoch FROM j.started_at - j.scheduled_for)::float8) AS start_lag_max
      FROM jobs j
     WHERE (j.schedule_id = p.id OR (j.schedule_id IS NULL AND j.schedule_name = p.name))
               AND j.schedule_name = p.name
               AND (%(since)s::float8 IS NULL
                    OR coalesce(j.scheduled_for, j.created_at) >= now() - make_interval(secs => %(since)s::float8))) a
 CROSS JOIN LATERAL (
    SELECT jsonb_object_agg(status, n) AS counts
      FROM (SELECT status, count(*) AS n FROM jobs j
             WHERE (j.schedule_id = p.id OR (j.schedule_id IS NULL AND j.schedule_name = p.name))
               AND j.schedule_name = p.name
               AND (%(since)s::float8 IS NULL
                    OR coalesce(j.scheduled_for, j.created_at) >= now() - make_interval(secs => %(since)s::float8))
             GROUP BY status) x) c
 ORDER BY p.name;

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

-- doctor_backend --
-- runledger-beat doctor: the server process this transaction runs on (a transaction pooler moves a session).
SELECT pg_backend_pid() AS pid;
