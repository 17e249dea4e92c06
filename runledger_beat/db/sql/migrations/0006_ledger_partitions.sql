-- The ledger partitioned by the UTC day of scheduled_for, so retention drops whole days in
-- milliseconds instead of deleting rows, and no statement beat runs grows with history.
--
--   jobs                      partitioned table: same name, same columns, same slot guarantee
--   jobs_pYYYYMMDD            one UTC day of fires, created ahead by runledger_maintain_ledger()
--   jobs_default              rows no day partition holds: no scheduled_for (raw SQL), or a day not
--                             (or no longer) created; retention deletes them in batches
--   jobs_before_YYYYMMDD      an existing ledger, attached whole below the cutover day
--
-- A populated ledger migrates without a long lock, in three steps: each runs in its own transaction,
-- the migration is recorded after the last, and each may run again (a beat killed half-way).
--   1. rows without scheduled_for take their created_at (a range partition holds no NULL key) and a
--      NOT VALID check bounds the ledger below a cutover two UTC midnights on: a brief lock. Rows that
--      cannot follow (no scheduled_for and a status the NOT VALID status check refuses to rewrite, or
--      written by hand for days past the cutover) are moved whole to jobs_unpartitioned. From here
--      until step 3 an insert without scheduled_for, or at or past the cutover, is refused;
--   2. the check is validated: one scan, with reads and writes going on (SHARE UPDATE EXCLUSIVE);
--   3. the partitioned table takes the name jobs, the old one is attached below the cutover (the valid
--      check proves its rows belong there: no scan) and its indexes become partitions of the new ones
--      (equal definitions are attached, not built). Indexes you added to jobs yourself stay on the old
--      table only: create them on jobs again and each partition gets one.
-- An empty ledger (a new install) is simply replaced.
--
-- jobs.id stays unique in practice (beat writes random UUIDs) but no longer by a constraint: a
-- partitioned table's unique indexes must hold the partition key. The slot guarantee does:
-- (schedule_id, scheduled_for) holds it.

DO $$
DECLARE
    cutover timestamptz := (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '2 days') AT TIME ZONE 'UTC';
    noted text;
    stray record;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = 'jobs'::regclass) <> 'r' OR NOT EXISTS (SELECT 1 FROM jobs) THEN
        RETURN;
    END IF;
    FOR stray IN SELECT ctid AS row_id FROM jobs WHERE scheduled_for IS NULL LOOP
        BEGIN
            UPDATE jobs SET scheduled_for = created_at WHERE ctid = stray.row_id;
        EXCEPTION WHEN check_violation THEN
            -- A row an older NOT VALID check lets stand but refuses any new version of: kept aside whole.
            CREATE TABLE IF NOT EXISTS jobs_unpartitioned (LIKE jobs);
            WITH moved AS (DELETE FROM jobs WHERE ctid = stray.row_id RETURNING *)
            INSERT INTO jobs_unpartitioned SELECT * FROM moved;
        END;
    END LOOP;
    IF EXISTS (SELECT 1 FROM jobs WHERE scheduled_for >= cutover) THEN  -- raw SQL written for days ahead
        CREATE TABLE IF NOT EXISTS jobs_unpartitioned (LIKE jobs);
        WITH moved AS (DELETE FROM jobs WHERE scheduled_for >= cutover RETURNING *)
        INSERT INTO jobs_unpartitioned SELECT * FROM moved;
    END IF;
    SELECT obj_description(oid, 'pg_constraint') INTO noted
      FROM pg_constraint WHERE conrelid = 'jobs'::regclass AND conname = 'jobs_before_partitions';
    IF noted IS NOT NULL AND noted::timestamptz < now() + interval '12 hours' THEN
        ALTER TABLE jobs DROP CONSTRAINT jobs_before_partitions;  -- a stale try: take a later cutover
        noted := NULL;
    END IF;
    IF noted IS NULL THEN
        EXECUTE format('ALTER TABLE jobs ADD CONSTRAINT jobs_before_partitions'
                       ' CHECK (scheduled_for IS NOT NULL AND scheduled_for < %L) NOT VALID', cutover);
        EXECUTE format('COMMENT ON CONSTRAINT jobs_before_partitions ON jobs IS %L', cutover);
    END IF;
END
$$;

-- runledger:commit

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
                WHERE conrelid = 'jobs'::regclass AND conname = 'jobs_before_partitions' AND NOT convalidated) THEN
        ALTER TABLE jobs VALIDATE CONSTRAINT jobs_before_partitions;
    END IF;
END
$$;

-- runledger:commit

DO $$
DECLARE
    old_table oid := 'jobs'::regclass;
    old_acl aclitem[];
    populated boolean;
    cutover timestamptz;
    old_name text;
    status_check text;
    item record;
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = old_table) <> 'r' THEN
        RETURN;
    END IF;
    LOCK TABLE jobs IN ACCESS EXCLUSIVE MODE;
    SELECT relacl INTO old_acl FROM pg_class WHERE oid = old_table;
    SELECT replace(pg_get_constraintdef(oid), ' NOT VALID', '') INTO status_check
      FROM pg_constraint WHERE conrelid = old_table AND conname = 'jobs_status_valid';
    populated := EXISTS (SELECT 1 FROM jobs);
    IF populated THEN
        SELECT obj_description(oid, 'pg_constraint')::timestamptz INTO cutover
          FROM pg_constraint WHERE conrelid = old_table AND conname = 'jobs_before_partitions' AND convalidated;
        IF cutover IS NULL OR cutover < now() + interval '1 hour' THEN
            RAISE EXCEPTION 'runledger: migration 0006 found jobs written while it ran; run the migration again'
                USING ERRCODE = 'object_not_in_prerequisite_state';
        END IF;
    END IF;

    CREATE TABLE jobs_partitioned (LIKE jobs INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE
                                   INCLUDING COMMENTS) PARTITION BY RANGE (scheduled_for);
    ALTER TABLE jobs_partitioned DROP CONSTRAINT IF EXISTS jobs_before_partitions;
    -- The status check may be NOT VALID on the old table; each new partition carries it instead.
    ALTER TABLE jobs_partitioned DROP CONSTRAINT IF EXISTS jobs_status_valid;
    ALTER TABLE jobs_partitioned ADD CONSTRAINT jobs_schedule_id_fkey
        FOREIGN KEY (schedule_id) REFERENCES job_schedules (id) ON DELETE SET NULL;

    IF populated THEN
        old_name := 'jobs_before_' || to_char(cutover AT TIME ZONE 'UTC', 'YYYYMMDD');
        FOR item IN SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
                     WHERE i.indrelid = old_table AND c.relname LIKE 'jobs\_%' LOOP
            EXECUTE format('ALTER INDEX %I RENAME TO %I', item.relname, old_name || substr(item.relname, 5));
        END LOOP;
        EXECUTE format('ALTER TABLE jobs_partitioned ATTACH PARTITION jobs FOR VALUES FROM (MINVALUE) TO (%L)',
                       cutover);
    ELSE
        DROP TABLE jobs;
    END IF;

    CREATE UNIQUE INDEX jobs_one_fire_per_slot ON jobs_partitioned (schedule_id, scheduled_for)
        WHERE stage = 'scheduled';
    CREATE INDEX jobs_pending_idx ON jobs_partitioned (created_at) WHERE status = 'pending';
    CREATE INDEX jobs_schedule_history_idx ON jobs_partitioned (schedule_id, created_at DESC);
    CREATE INDEX jobs_live_idx ON jobs_partitioned (schedule_id, scheduled_for)
        WHERE status IN ('pending', 'sent', 'received', 'started', 'retry');
    CREATE INDEX jobs_started_idx ON jobs_partitioned (started_at) WHERE status = 'started';
    CREATE INDEX jobs_sent_idx ON jobs_partitioned (sent_at) WHERE status = 'sent';
    CREATE INDEX jobs_buffered_idx ON jobs_partitioned (schedule_id, scheduled_for) WHERE status = 'buffered';
    -- Workers mark rows by id: every partition has an index on it (the old table its primary key).
    IF populated THEN
        CREATE INDEX jobs_id_idx ON ONLY jobs_partitioned (id);
    ELSE
        CREATE INDEX jobs_id_idx ON jobs_partitioned (id);
    END IF;

    CREATE TABLE jobs_default PARTITION OF jobs_partitioned DEFAULT;
    IF status_check IS NOT NULL THEN
        EXECUTE format('ALTER TABLE jobs_default ADD CONSTRAINT jobs_status_valid %s', status_check);
    END IF;
    IF populated THEN
        EXECUTE format('ALTER TABLE jobs RENAME TO %I', old_name);
    END IF;
    ALTER TABLE jobs_partitioned RENAME TO jobs;
    -- Whoever could read or write the ledger still can.
    FOR item IN SELECT a.grantee, a.privilege_type FROM aclexplode(old_acl) a
                 WHERE a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'jobs'::regclass) LOOP
        EXECUTE format('GRANT %s ON jobs TO %s', item.privilege_type,
                       CASE WHEN item.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(item.grantee)) END);
    END LOOP;
END
$$;

-- Day partitions ahead (and yesterday's), old ones dropped past the retention, the default
-- partition's old rows deleted in batches. Any beat calls it (at start, then hourly); it runs with
-- its owner's rights, so beat's role needs only EXECUTE. Attaching a partition locks job_schedules
-- (SHARE ROW EXCLUSIVE, for the foreign key) and dropping one locks jobs, which a beat preparing an
-- instant holds: so DDL is done only under the prepare lock (not waited for: 'busy', try again) and
-- waits 100 ms at most for any other lock. When nothing is due it takes no lock at all. One caller at
-- a time. as_of stands in for now() (tests, benchmarks).
CREATE FUNCTION runledger_maintain_ledger(retention interval, days_ahead integer DEFAULT 7,
                                          as_of timestamptz DEFAULT now())
RETURNS TABLE (action text, partition_name text) LANGUAGE plpgsql SECURITY DEFINER AS $$
DECLARE
    today timestamptz := date_trunc('day', as_of AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
    covered_until timestamptz;
    day_start timestamptz;
    part_name text;
    part record;
    removed bigint;
    locked boolean := false;
BEGIN
    IF retention < interval '1 day' THEN
        RAISE EXCEPTION 'runledger_retention must be at least one day, not %', retention
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF days_ahead IS NULL OR days_ahead NOT BETWEEN 1 AND 366 THEN
        RAISE EXCEPTION 'days_ahead must be 1 to 366, not %', days_ahead USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtextextended('runledger_beat.ledger.' || current_schema(), 0)) THEN
        RETURN;  -- another caller is at it
    END IF;
    PERFORM set_config('lock_timeout', '100ms', true);
    -- Days below an attached pre-partitioning ledger are its own.
    SELECT max(to_date(substr(c.relname, 13), 'YYYYMMDD')::timestamp AT TIME ZONE 'UTC') INTO covered_until
      FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
     WHERE i.inhparent = 'jobs'::regclass AND c.relname ~ '^jobs_before_[0-9]{8}$';

    FOR i IN -1 .. days_ahead LOOP
        day_start := today + make_interval(days => i);
        part_name := 'jobs_p' || to_char(day_start AT TIME ZONE 'UTC', 'YYYYMMDD');
        CONTINUE WHEN to_regclass(part_name) IS NOT NULL OR day_start < covered_until;
        IF NOT locked THEN
            locked := pg_try_advisory_xact_lock(hashtextextended('runledger_beat.prepare.' || current_schema(), 0));
            IF NOT locked THEN
                action := 'busy'; partition_name := part_name; RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        BEGIN
            EXECUTE format('CREATE TABLE %I (LIKE jobs_default INCLUDING ALL)', part_name);
            -- Rows written to the default while the day had no partition move into it.
            EXECUTE format('WITH moved AS (DELETE FROM jobs_default WHERE scheduled_for >= $1 AND scheduled_for < $2'
                           ' RETURNING *) INSERT INTO %I SELECT * FROM moved', part_name)
                USING day_start, day_start + interval '1 day';
            EXECUTE format('ALTER TABLE jobs ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                           part_name, day_start, day_start + interval '1 day');
            action := 'created'; partition_name := part_name; RETURN NEXT;
        EXCEPTION
            WHEN invalid_object_definition THEN NULL;  -- overlaps a partition made by hand
            WHEN lock_not_available THEN action := 'busy'; partition_name := part_name; RETURN NEXT;
        END;
    END LOOP;

    IF retention IS NULL THEN
        RETURN;
    END IF;
    FOR part IN
        SELECT c.relname,
               (CASE WHEN c.relname LIKE 'jobs\_p%' THEN to_date(substr(c.relname, 7), 'YYYYMMDD') + 1
                     ELSE to_date(substr(c.relname, 13), 'YYYYMMDD') END)::timestamp AT TIME ZONE 'UTC' AS ends
          FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
         WHERE i.inhparent = 'jobs'::regclass
           AND (c.relname ~ '^jobs_p[0-9]{8}$' OR c.relname ~ '^jobs_before_[0-9]{8}$')
         ORDER BY ends
    LOOP
        EXIT WHEN part.ends > as_of - retention;
        IF NOT locked THEN
            locked := pg_try_advisory_xact_lock(hashtextextended('runledger_beat.prepare.' || current_schema(), 0));
            IF NOT locked THEN
                action := 'busy'; partition_name := part.relname; RETURN NEXT;
                RETURN;
            END IF;
        END IF;
        BEGIN
            EXECUTE format('DROP TABLE %I', part.relname);
            action := 'dropped'; partition_name := part.relname; RETURN NEXT;
        EXCEPTION WHEN lock_not_available THEN
            action := 'busy'; partition_name := part.relname; RETURN NEXT;
        END;
    END LOOP;
    DELETE FROM jobs_default WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM jobs_default WHERE coalesce(scheduled_for, created_at) < as_of - retention LIMIT 10000));
    GET DIAGNOSTICS removed = ROW_COUNT;
    IF removed > 0 THEN
        action := 'deleted ' || removed; partition_name := 'jobs_default'; RETURN NEXT;
    END IF;
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION runledger_maintain_ledger(interval, integer, timestamptz)'
                   ' SET search_path = %I, pg_temp', current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION runledger_maintain_ledger(interval, integer, timestamptz) FROM PUBLIC;

SELECT count(*) FROM runledger_maintain_ledger(NULL);
