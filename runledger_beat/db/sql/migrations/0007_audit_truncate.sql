-- 0007: a TRUNCATE of job_schedules is audited too. TRUNCATE fires no row trigger, so until now it
-- left no trace in schedule_changes, though `TRUNCATE job_schedules CASCADE` also empties the
-- ledger. A statement-level BEFORE TRUNCATE trigger logs one 'TRUNCATE' entry per schedule about to
-- go (before = the row, after = NULL), with the row trigger's rights and "who". Beat never truncates.
-- Runs with search_path set to the runledger schema; names are unqualified.

-- The old check allowed fewer operations, so the rows already logged satisfy the new one: NOT VALID
-- spares the audit log a scan under this migration's lock.
ALTER TABLE schedule_changes DROP CONSTRAINT IF EXISTS schedule_changes_operation_check;
ALTER TABLE schedule_changes ADD CONSTRAINT schedule_changes_operation_check
    CHECK (operation IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')) NOT VALID;

CREATE FUNCTION runledger_audit_truncate() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('INSERT INTO %1$I.schedule_changes (who, application_name, operation, schedule_id,'
                   ' schedule_name, before, after)'
                   ' SELECT session_user, current_setting(''application_name''), ''TRUNCATE'', s.id, s.name,'
                   ' to_jsonb(s) - ''updated_at'', NULL FROM %1$I.%2$I s ORDER BY s.name',
                   TG_TABLE_SCHEMA, TG_TABLE_NAME);
    RETURN NULL;
END
$$;

CREATE TRIGGER job_schedules_audit_truncate
    BEFORE TRUNCATE ON job_schedules
    FOR EACH STATEMENT EXECUTE FUNCTION runledger_audit_truncate();
