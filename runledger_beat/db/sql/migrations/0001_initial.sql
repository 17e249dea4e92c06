-- 0001: schedules, the ledger, and change notification.
-- Runs with search_path set to the runledger schema; names are unqualified.

CREATE TABLE job_schedules (
    id                    uuid PRIMARY KEY,
    name                  text NOT NULL UNIQUE CHECK (name <> '' AND name = btrim(name)),
    job_type              text NOT NULL CHECK (job_type <> ''),
    organization_id       uuid,
    payload_template      jsonb NOT NULL DEFAULT '{"args": [], "kwargs": {}}',
    kind                  text NOT NULL DEFAULT 'cron' CHECK (kind IN ('cron', 'interval', 'once')),
    cron_expr             text,
    cron_day_and          boolean NOT NULL DEFAULT false,
    interval_seconds      double precision,
    run_at                timestamptz,
    anchor_at             timestamptz NOT NULL DEFAULT now(),
    timezone              text NOT NULL DEFAULT 'UTC',
    is_active             boolean NOT NULL DEFAULT true,
    next_fire_at          timestamptz,
    last_fired_at         timestamptz,
    max_jitter_seconds    integer NOT NULL DEFAULT 0 CHECK (max_jitter_seconds BETWEEN 0 AND 86400),
    options               jsonb NOT NULL DEFAULT '{}',
    misfire_policy        text NOT NULL DEFAULT 'fire_once' CHECK (misfire_policy IN ('fire_once', 'skip')),
    misfire_grace_seconds double precision,
    overlap_policy        text NOT NULL DEFAULT 'allow' CHECK (overlap_policy IN ('allow', 'skip')),
    start_at              timestamptz,
    end_at                timestamptz,
    source                text NOT NULL DEFAULT 'api' CHECK (source IN ('api', 'config')),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now()
);

-- The claim scans only active rows in cursor order.
CREATE INDEX job_schedules_due_idx ON job_schedules (next_fire_at) WHERE is_active;

CREATE TABLE jobs (
    id                uuid PRIMARY KEY,
    schedule_id       uuid REFERENCES job_schedules (id) ON DELETE SET NULL,
    schedule_name     text,
    scheduled_for     timestamptz,
    job_type          text NOT NULL,
    organization_id   uuid,
    payload           jsonb NOT NULL,
    options           jsonb NOT NULL DEFAULT '{}',
    stage             text NOT NULL DEFAULT 'scheduled' CHECK (stage IN ('scheduled', 'manual')),
    status            text NOT NULL DEFAULT 'pending',
    created_at        timestamptz NOT NULL DEFAULT now(),
    sent_at           timestamptz,
    started_at        timestamptz,
    finished_at       timestamptz,
    dispatch_attempts integer NOT NULL DEFAULT 0,
    last_error        text,
    worker            text,
    retries           integer NOT NULL DEFAULT 0,
    duplicates        integer NOT NULL DEFAULT 0
);

-- Two ledger rows for one slot are impossible, whatever the locking does.
CREATE UNIQUE INDEX jobs_one_fire_per_slot ON jobs (schedule_id, scheduled_for) WHERE stage = 'scheduled';
CREATE INDEX jobs_pending_idx ON jobs (created_at) WHERE status = 'pending';
CREATE INDEX jobs_schedule_history_idx ON jobs (schedule_id, created_at DESC);

-- Any change to schedules (API, CLI, raw SQL, bulk UPDATE) wakes every beat,
-- except beat's own cursor moves, which set runledger.internal for their transaction.
CREATE FUNCTION runledger_notify_schedules() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF coalesce(current_setting('runledger.internal', true), '') <> 'on' THEN
        PERFORM pg_notify('runledger_schedules', current_schema());
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER job_schedules_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON job_schedules
    FOR EACH STATEMENT EXECUTE FUNCTION runledger_notify_schedules();
