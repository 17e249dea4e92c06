-- 0008: no role can do more than its grant.
--
--   * Every SECURITY DEFINER function is callable only by the roles granted EXECUTE on it: PUBLIC loses it,
--     and so does any role default privileges gave it to. The audit trigger functions are granted to no one:
--     Postgres checks EXECUTE on a trigger's function when the trigger is created, not when it fires, so the
--     triggers on job_schedules keep firing for every writer while nobody can attach the functions elsewhere.
--   * The audit trigger functions refuse to run on any table but this schema's job_schedules, and write this
--     schema's schedule_changes: both names are written into their bodies here (format(), once), never taken
--     from TG_TABLE_SCHEMA. A role's own temp tables named job_schedules and schedule_changes, with its own
--     trigger on the second, no longer run that trigger with the owner's rights.
--   * Beat's cursor moves stay out of the audit log only when they are made inside runledger_advance_cursors()
--     (SECURITY DEFINER; EXECUTE for beat's role alone): the audit trigger skips a change when
--     runledger.internal is on AND current_user is the role that ran this migration, which owns that function.
--     Any other session that sets runledger.internal is audited all the same. The owner's own sessions can
--     disable triggers anyway (SECURITY.md).
--   * Ledger maintenance takes no time from its caller: runledger_maintain_ledger(retention, days_ahead) works
--     around now(), at most 31 days ahead, dropping only days past a retention of at least one day. Whoever
--     could call the old form (with as_of) may call it. The maintenance as of another day (tests, benchmarks,
--     partitions made by hand) is runledger_maintain_ledger_as_of(retention, days_ahead, as_of), the owner's
--     alone: SECURITY INVOKER and EXECUTE for no one else, so even a mistaken GRANT cannot drop or create a
--     partition through it. The name runledger_maintain_ledger stays unique, so a GRANT naming it without its
--     arguments still works.
--
-- Each function pins its search_path; relations are named with this schema where the path leaves them out.
-- Renaming the schema or the migrating role later leaves the names written here stale: the audit functions
-- then refuse every change (rename back), and beat's cursor moves are audited (no longer skipped).
-- Runs with search_path set to the runledger schema; names are unqualified.

-- Who may maintain the ledger now (beat's role, by the README's grants) keeps that right, on the new form.
CREATE TEMP TABLE runledger_maintainers ON COMMIT DROP AS
SELECT DISTINCT a.grantee
  FROM pg_proc p CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
 WHERE p.oid = 'runledger_maintain_ledger(interval, integer, timestamptz)'::regprocedure
   AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner;

-- The maintenance as of a chosen day becomes the owner's own: renamed (its body, defaults and pinned search_path
-- stay as 0006 made them), run with its caller's rights, and executable by no one else (below). Only the owner
-- (or a superuser) can create or drop a partition with it.
ALTER FUNCTION runledger_maintain_ledger(interval, integer, timestamptz) RENAME TO runledger_maintain_ledger_as_of;
ALTER FUNCTION runledger_maintain_ledger_as_of(interval, integer, timestamptz) SECURITY INVOKER;

-- What beats call (at start, then hourly) and `runledger-beat ledger --maintain`: the maintenance as of now(),
-- with the owner's rights, so beat's role needs only EXECUTE. days_ahead is 1 to 31; retention is at least a
-- day (NULL: drop nothing).
CREATE FUNCTION runledger_maintain_ledger(retention interval, days_ahead integer DEFAULT 7)
RETURNS TABLE (action text, partition_name text) LANGUAGE plpgsql SECURITY DEFINER AS $$
BEGIN
    IF days_ahead IS NULL OR days_ahead NOT BETWEEN 1 AND 31 THEN
        RAISE EXCEPTION 'days_ahead must be 1 to 31, not %', days_ahead USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY SELECT m.action, m.partition_name
                   FROM runledger_maintain_ledger_as_of(retention, days_ahead, now()) m;
END
$$;

DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION runledger_maintain_ledger(interval, integer)'
                   ' SET search_path = %I, pg_temp', current_schema());
END
$$;

-- The audit trigger functions, their table and log written in; beat's cursor moves; the audit trigger's skip.
DO $migration$
DECLARE
    home text := quote_ident(current_schema());
    audited text := quote_ident(current_schema()) || '.job_schedules';
BEGIN
    -- One row per changed schedule row; before/after hold only the changed columns (updated_at aside). "who" is
    -- the session's login role. Runs with its owner's rights, so writers need no grant on the log.
    EXECUTE format($create$
CREATE OR REPLACE FUNCTION runledger_audit_schedules() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
DECLARE
    old_doc jsonb;
    new_doc jsonb;
    b jsonb;
    a jsonb;
BEGIN
    IF TG_RELID <> %1$L::regclass THEN
        RAISE EXCEPTION 'runledger_audit_schedules() audits %% only, not %%', %1$L, TG_RELID::regclass
            USING ERRCODE = 'insufficient_privilege';
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
    INSERT INTO %2$s.schedule_changes (who, application_name, operation, schedule_id, schedule_name, before, after)
    VALUES (session_user, current_setting('application_name'), TG_OP,
            (coalesce(new_doc, old_doc) ->> 'id')::uuid, coalesce(new_doc, old_doc) ->> 'name', b, a);
    RETURN NULL;
END
$body$
$create$, audited, home);

    -- TRUNCATE: one entry per schedule about to go (before = the row, after = NULL).
    EXECUTE format($create$
CREATE OR REPLACE FUNCTION runledger_audit_truncate() RETURNS trigger LANGUAGE plpgsql
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
BEGIN
    IF TG_RELID <> %1$L::regclass THEN
        RAISE EXCEPTION 'runledger_audit_truncate() audits %% only, not %%', %1$L, TG_RELID::regclass
            USING ERRCODE = 'insufficient_privilege';
    END IF;
    INSERT INTO %2$s.schedule_changes (who, application_name, operation, schedule_id, schedule_name, before, after)
    SELECT session_user, current_setting('application_name'), 'TRUNCATE', s.id, s.name, to_jsonb(s) - 'updated_at',
           NULL
      FROM %2$s.job_schedules s
     ORDER BY s.name;
    RETURN NULL;
END
$body$
$create$, audited, home);

    -- Beat moves the cursors of the schedules it claimed: each one's next fire (NULL deactivates it), and
    -- whether the slot just recorded fired (a fire recorded ahead counts as fired at its instant). Exactly the
    -- UPDATE beat ran itself before; returns how many rows moved.
    EXECUTE format($create$
CREATE FUNCTION runledger_advance_cursors(ids uuid[], next_fire_ats timestamptz[], fired boolean[])
RETURNS integer LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $body$
WITH moved AS (
    UPDATE %1$s.job_schedules s
       SET next_fire_at  = u.next_fire_at,
           last_fired_at = CASE WHEN u.fired THEN greatest(statement_timestamp(), s.next_fire_at)
                                ELSE s.last_fired_at END,
           is_active     = u.next_fire_at IS NOT NULL,
           updated_at    = statement_timestamp()
      FROM unnest($1, $2, $3) AS u(id, next_fire_at, fired)
     WHERE s.id = u.id
    RETURNING 1
)
SELECT count(*)::integer FROM moved
$body$
$create$, home);

    -- Beat's own moves (inside runledger_advance_cursors, with runledger.internal on for the transaction) are
    -- not changes; every other change is. A burst moves thousands of cursors in one statement: the condition is
    -- one comparison per row, and the trigger function is not called for them.
    DROP TRIGGER job_schedules_audit ON job_schedules;
    EXECUTE format($create$
CREATE TRIGGER job_schedules_audit
    AFTER INSERT OR UPDATE OR DELETE ON job_schedules
    FOR EACH ROW WHEN (coalesce(current_setting('runledger.internal', true), '') <> 'on' OR current_user <> %1$L)
    EXECUTE FUNCTION runledger_audit_schedules()
$create$, current_user);
END
$migration$;

-- The definer functions (and the owner's maintenance form) start from their owner alone, whatever PUBLIC or
-- default privileges gave; then the maintainers get the two-argument maintenance back.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT p.oid::regprocedure AS fn, a.grantee
          FROM pg_proc p CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
         WHERE p.oid IN ('runledger_audit_schedules()'::regprocedure, 'runledger_audit_truncate()'::regprocedure,
                         'runledger_advance_cursors(uuid[], timestamptz[], boolean[])'::regprocedure,
                         'runledger_maintain_ledger(interval, integer)'::regprocedure,
                         'runledger_maintain_ledger_as_of(interval, integer, timestamptz)'::regprocedure)
           AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %s', item.fn,
                       CASE WHEN item.grantee = 0 THEN 'PUBLIC' ELSE quote_ident(pg_get_userbyid(item.grantee)) END);
    END LOOP;
    FOR item IN SELECT grantee FROM runledger_maintainers LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION runledger_maintain_ledger(interval, integer) TO %I',
                       pg_get_userbyid(item.grantee));
    END LOOP;
END
$$;
