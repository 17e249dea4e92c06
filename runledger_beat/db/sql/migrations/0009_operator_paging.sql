-- 0009: operator surfaces that cost a page, not the table.
--
--   * Search of schedules by name or task. With the pg_trgm extension, one GIN trigram index over
--     (name, job_type) serves substring search (ILIKE '%text%'). The migration creates the extension in
--     schema public when it is missing and this role may (pg_trgm is a trusted extension: the database's
--     owner, or a role with CREATE on it, may create it); otherwise, or when the contrib files are not
--     installed, two btree indexes on lower(name) and lower(job_type) (text_pattern_ops) serve prefix
--     search instead. Which one exists decides how the dashboard and `list --search` match
--     (db.ops_store.OpsStore.search_mode). To move from prefix to substring later: CREATE EXTENSION pg_trgm,
--     then create job_schedules_search_trgm_idx as below (the prefix indexes may stay).
--     The extension is never put in this schema: dropping a runledger schema must not drop it for others.
--   * A schedule's page reads its latest ledger rows by schedule_id (jobs_schedule_history_idx); the rows of
--     a removed schedule (schedule_id set to NULL) are found by name through a partial index that holds
--     only such rows, so the ledger's insert path does not pay for it.
--   * The problems page reads the newest failed, lost and expired rows through a partial index of those rows, and
--     the first faulted schedules in its order (quarantined first) through an index on schedule_faults.
-- Two steps, each of which may run again. Runs with search_path set to the runledger schema; names are
-- unqualified.

DO $$
DECLARE
    ext_schema text;
BEGIN
    SELECT n.nspname INTO ext_schema
      FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    IF ext_schema IS NULL THEN
        BEGIN
            CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
        EXCEPTION WHEN insufficient_privilege OR undefined_file OR invalid_schema_name OR unique_violation
                       OR duplicate_object OR feature_not_supported THEN
            NULL;  -- not allowed, not installed, or created by a concurrent migration (looked up again below)
        END;
        SELECT n.nspname INTO ext_schema
          FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
    END IF;
    IF ext_schema IS NOT NULL THEN
        EXECUTE format('CREATE INDEX IF NOT EXISTS job_schedules_search_trgm_idx ON job_schedules '
                       'USING gin (name %1$I.gin_trgm_ops, job_type %1$I.gin_trgm_ops)', ext_schema);
    ELSE
        CREATE INDEX IF NOT EXISTS job_schedules_name_prefix_idx ON job_schedules (lower(name) text_pattern_ops);
        CREATE INDEX IF NOT EXISTS job_schedules_task_prefix_idx ON job_schedules (lower(job_type) text_pattern_ops);
    END IF;
END $$;

CREATE INDEX IF NOT EXISTS schedule_faults_problems_idx ON schedule_faults (quarantined_at DESC NULLS LAST, failed_at DESC);

-- The ledger's two partial indexes are built partition by partition, then created on jobs, which attaches
-- them (no second build). Building an index reads its partition whole and holds writes to that partition back
-- until the transaction commits, so the history (the days before yesterday, UTC) is built in a step of its own:
-- beats and workers keep writing today's rows meanwhile (only updates of older rows wait). The second step
-- builds the partitions still written (yesterday, today, the days ahead, the default) and attaches them all.
CREATE OR REPLACE FUNCTION runledger_index_partitions_0009(history boolean) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    part record;
    recent date := (now() AT TIME ZONE 'UTC')::date - 1;
BEGIN
    FOR part IN
        SELECT c.relname,
               c.relname ~ '^jobs_p[0-9]{8}$' AND to_date(substr(c.relname, 7), 'YYYYMMDD') < recent
               OR c.relname ~ '^jobs_before_' AS old
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'jobs'::regclass AND c.relkind = 'r'
         ORDER BY c.relname
    LOOP
        CONTINUE WHEN history AND NOT part.old;
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (schedule_name, created_at DESC) WHERE schedule_id IS NULL',
                       left(part.relname, 40) || '_removed_idx', part.relname);
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %I (created_at DESC) '
                       'WHERE status IN (''failed'', ''lost'', ''expired'')',
                       left(part.relname, 40) || '_problem_idx', part.relname);
    END LOOP;
END $$;
SELECT runledger_index_partitions_0009(true);
-- runledger:commit
SELECT runledger_index_partitions_0009(false);
CREATE INDEX IF NOT EXISTS jobs_removed_schedule_idx ON jobs (schedule_name, created_at DESC) WHERE schedule_id IS NULL;
CREATE INDEX IF NOT EXISTS jobs_problem_idx ON jobs (created_at DESC) WHERE status IN ('failed', 'lost', 'expired');
DROP FUNCTION runledger_index_partitions_0009(boolean);
