-- What the worker hook runs (worker.py, through db.worker_store): one statement per task event.
-- Each statement: a `-- name --` line, a line saying what it is for, then the SQL; Python runs it as
-- queries.NAME; the stores run them with every runledger name schema-qualified (queries.for_schema).

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
