-- 0003: faults contained per schedule and per fire, and the ledger's live rows indexed.
-- Runs with search_path set to the runledger schema; names are unqualified.

-- A schedule that failed to be read, planned or recorded. Beat never writes the schedule row
-- for a fault (an old row may break 0002's constraints, so any UPDATE of it would fail):
-- the claim skips a schedule until retry_at, and for good once quarantined. A fire of the
-- schedule, or `runledger-beat resume`, deletes the row.
CREATE TABLE schedule_faults (
    schedule_id    uuid PRIMARY KEY REFERENCES job_schedules (id) ON DELETE CASCADE,
    failures       integer NOT NULL DEFAULT 1,
    last_error     text NOT NULL,
    failed_at      timestamptz NOT NULL DEFAULT now(),
    retry_at       timestamptz NOT NULL,
    quarantined_at timestamptz
);
CREATE INDEX schedule_faults_retry_idx ON schedule_faults (retry_at) WHERE quarantined_at IS NULL;

-- Whether an instant is one Python can hold (finite, a day inside year 1..9999; limits.MIN/MAX_INSTANT).
-- The claim returns bad instants as NULL and names them, so one old bad row never breaks a batch's fetch.
CREATE FUNCTION runledger_instant_ok(t timestamptz) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $$ SELECT t IS NULL OR (isfinite(t) AND t >= '0001-01-02 00:00:00+00' AND t < '9999-12-31 00:00:00+00') $$;
GRANT EXECUTE ON FUNCTION runledger_instant_ok(timestamptz) TO PUBLIC;

-- Whether a sent fire's message has expired: its `expires` option (seconds) counted from its instant.
-- One inlinable expression, so the sweep that resolves sent rows reads each live row once.
CREATE FUNCTION runledger_sent_expired(options jsonb, scheduled_for timestamptz, sent_at timestamptz)
    RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
AS $$
SELECT CASE WHEN options ->> 'expires' ~ '^[0-9]+(\.[0-9]+)?$'
            THEN coalesce(coalesce(scheduled_for, sent_at)
                          + make_interval(secs => (options ->> 'expires')::float8) < statement_timestamp(), false)
            ELSE false END
$$;
GRANT EXECUTE ON FUNCTION runledger_sent_expired(jsonb, timestamptz, timestamptz) TO PUBLIC;

-- When a fire's publish last failed (the outbox backs off per fire from it).
ALTER TABLE jobs ADD COLUMN last_attempt_at timestamptz;

-- Workers running the ledger hook report themselves, so beat knows a `sent` row that never
-- started is lost rather than waiting for a worker without the hook.
CREATE TABLE workers (
    hostname text PRIMARY KEY,
    pid      integer,
    seen_at  timestamptz NOT NULL DEFAULT now()
);

-- Everything beat does between instants reads live rows only.
CREATE INDEX jobs_live_idx ON jobs (schedule_id, scheduled_for)
    WHERE status IN ('pending', 'sent', 'received', 'started', 'retry');
CREATE INDEX jobs_started_idx ON jobs (started_at) WHERE status = 'started';
CREATE INDEX jobs_sent_idx ON jobs (sent_at) WHERE status = 'sent';
