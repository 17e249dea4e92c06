-- The demo's own statements (runledger-beat demo): its runs table, its schedules and its summary.
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME. All run with search_path set to the runledger schema.

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
