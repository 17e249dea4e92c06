-- 0004: schedule features: pause notes, the audit log, backfill, skip dates and
-- calendars, and the buffer_one / cancel_other overlap policies.
-- Additive only: new columns (with defaults), new tables, a trigger, and the overlap CHECK widened.
-- Runs with search_path set to the runledger schema; names are unqualified.

-- Pause with a note: what, when and who (database role and application_name of the session).
ALTER TABLE job_schedules
    ADD COLUMN pause_note            text CHECK (length(pause_note) <= 2000),
    ADD COLUMN paused_at             timestamptz,
    ADD COLUMN paused_by             text,
    ADD COLUMN paused_by_application text;

-- Named calendars of excluded local dates, shared by many schedules.
CREATE TABLE calendars (
    name       text PRIMARY KEY CHECK (name <> '' AND name = btrim(name) AND length(name) <= 200),
    dates      date[] NOT NULL DEFAULT '{}' CHECK (cardinality(dates) <= 10000),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Skip dates: the schedule's own excluded local dates, and a calendar whose dates are excluded too.
ALTER TABLE job_schedules
    ADD COLUMN skip_dates date[] NOT NULL DEFAULT '{}' CHECK (cardinality(skip_dates) <= 10000),
    ADD COLUMN calendar   text REFERENCES calendars (name) ON UPDATE CASCADE ON DELETE RESTRICT;

-- Overlap: buffer_one (one later fire waits while a run is live) and cancel_other (revoke the live run).
-- overlap_terminate is the terminate flag cancel_other passes to app.control.revoke.
ALTER TABLE job_schedules DROP CONSTRAINT job_schedules_overlap_policy_check;
ALTER TABLE job_schedules
    ADD CONSTRAINT job_schedules_overlap_policy_check
        CHECK (overlap_policy IN ('allow', 'skip', 'buffer_one', 'cancel_other')),
    ADD COLUMN overlap_terminate boolean NOT NULL DEFAULT false;

-- Ledger rows: a backfill marker (the recovery sweep publishes those at once) and when a buffered
-- fire was released for publication (likewise published at once).
ALTER TABLE jobs
    ADD COLUMN backfill    boolean NOT NULL DEFAULT false,
    ADD COLUMN released_at timestamptz;

-- Buffered fires waiting for their schedule's live run to finish (the release looks them up).
CREATE INDEX jobs_buffered_idx ON jobs (schedule_id, scheduled_for) WHERE status = 'buffered';

-- The audit log: every change to a schedule by anyone but beat itself.
CREATE TABLE schedule_changes (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    who              text NOT NULL DEFAULT current_user,
    application_name text,
    operation        text NOT NULL CHECK (operation IN ('INSERT', 'UPDATE', 'DELETE')),
    schedule_id      uuid,
    schedule_name    text,
    before           jsonb,
    after            jsonb
);
CREATE INDEX schedule_changes_at_idx ON schedule_changes (at);
CREATE INDEX schedule_changes_name_idx ON schedule_changes (schedule_name, at);

-- One row per changed schedule row; before/after hold only the changed columns (updated_at aside).
-- Beat's own cursor moves set runledger.internal = 'on' for their transaction and are not changes.
-- The log is written into the schema of the table changed, whatever the session's search_path. The function
-- runs with its owner's rights (SECURITY DEFINER, search_path pinned), so any role that may write schedules
-- -- raw SQL included -- is audited without an INSERT grant on the log; "who" is the session's login role.
CREATE FUNCTION runledger_audit_schedules() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    old_doc jsonb;
    new_doc jsonb;
    b jsonb;
    a jsonb;
BEGIN
    IF coalesce(current_setting('runledger.internal', true), '') = 'on' THEN
        RETURN NULL;
    END IF;
    old_doc := CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) - 'updated_at' END;
    new_doc := CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) - 'updated_at' END;
    IF TG_OP = 'UPDATE' THEN
        SELECT jsonb_object_agg(o.key, o.value), jsonb_object_agg(o.key, n.value)
          INTO b, a
          FROM jsonb_each(old_doc) o JOIN jsonb_each(new_doc) n ON n.key = o.key
         WHERE o.value IS DISTINCT FROM n.value;
        IF b IS NULL THEN
            RETURN NULL;  -- nothing but updated_at changed
        END IF;
    ELSE
        b := old_doc;
        a := new_doc;
    END IF;
    EXECUTE format('INSERT INTO %I.schedule_changes (who, application_name, operation, schedule_id, schedule_name,'
                   ' before, after) VALUES (session_user, current_setting(''application_name''), $1, $2::uuid, $3, $4, $5)',
                   TG_TABLE_SCHEMA)
      USING TG_OP, coalesce(new_doc, old_doc)->>'id', coalesce(new_doc, old_doc)->>'name', b, a;
    RETURN NULL;
END
$$;

-- Beat's own transactions (runledger.internal = on) skip the trigger entirely: a burst moves thousands of
-- cursors in one statement, and a row trigger call each would cost it.
CREATE TRIGGER job_schedules_audit
    AFTER INSERT OR UPDATE OR DELETE ON job_schedules
    FOR EACH ROW WHEN (coalesce(current_setting('runledger.internal', true), '') <> 'on')
    EXECUTE FUNCTION runledger_audit_schedules();
