"""Least privilege: beat, workers and the CLI run with only what `runledger-beat grants` prints (the README shows
it); a newer database stops beat. tests/e2e/test_attacks.py tries each role as an attacker would.

The schema is migrated by its owner (here postgres); the limited roles have no CREATE anywhere.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from runledger_beat import api
from runledger_beat.db import check_version, connect, migrate, migration_files, queries, schema_ready
from runledger_beat.db.beat_store import BeatStore
from runledger_beat.db.grants import KINDS, render
from runledger_beat.db.ops_store import OpsStore
from runledger_beat.errors import ConfigError
from runledger_beat.ops.listing import next_fires, schedule_count, schedule_page
from runledger_beat.ops.stats import stats

from ..support.e2e import delete_queue, prepare
from ..support.procs import ROOT, celery_env, start_beat, start_worker
from ..support.roles import limited_roles, role_dsn
from ..support.rows import insert_schedule
from ..support.services import wait_for

CLI = Path(sys.executable).parent / "runledger-beat"
KNOWN = max(version for version, _, _ in migration_files())
NEWER_LINE = (f"runledger_schema: database is at migration 999 but this runledger_beat knows up to {KNOWN}; "
              "upgrade runledger_beat")


@pytest.fixture
def roles(pg_dsn, schema):
    """Roles beat / worker / cli / dashboard / dashboard-writer with only what `runledger-beat grants` prints (the
    worker may also record the test tasks' executions), dropped afterwards."""
    with limited_roles(pg_dsn, schema) as names:
        yield names


def _cli(dsn: str, schema: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "--dsn", dsn, "--schema", schema, *argv], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)


def test_roles_have_no_create(roles, admin_db):
    for role in roles.values():
        row = admin_db.execute("SELECT has_database_privilege(%s, current_database(), 'CREATE') AS db,"
                               " has_schema_privilege(%s, 'public', 'CREATE') AS pub", (role, role)).fetchone()
        assert row == {"db": False, "pub": False}


@pytest.fixture
def admin_db(pg_dsn):
    conn = connect(pg_dsn, "public", autocommit=True)
    yield conn
    conn.close()


def test_limited_roles_run_beat_worker_and_cli(pg_dsn, schema, db, roles, amqp_url):
    cli_dsn = role_dsn(pg_dsn, roles["cli"])
    done = _cli(cli_dsn, schema, "add", "priv", "--task", "rl.record", "--every", "1s", "--args", '["priv"]', "--json")
    assert done.returncode == 0, done.stderr
    listed = _cli(cli_dsn, schema, "list", "--json")
    assert listed.returncode == 0 and [r["name"] for r in json.loads(listed.stdout)] == ["priv"]
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    week_on = (datetime.now(timezone.utc) + timedelta(days=7)).strftime("jobs_p%Y%m%d")
    db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(week_on)))  # the limited beat makes it again
    beat = start_beat(celery_env(role_dsn(pg_dsn, roles["beat"]), schema, amqp_url, queue), "priv-beat")
    worker = start_worker(celery_env(role_dsn(pg_dsn, roles["worker"]), schema, amqp_url, queue, hook=True),
                          "priv-worker", concurrency=1)
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'success'").fetchone()["n"] >= 2,
                 timeout=45, interval=0.3, message=f"fires to succeed\nBEAT:\n{beat.log()}\nWORKER:\n{worker.log()}")
        assert beat.alive() and worker.alive()
        assert "permission denied" not in beat.log() + worker.log()
        assert db.execute("SELECT to_regclass(%s) IS NOT NULL AS made", (week_on,)).fetchone()["made"], beat.log()
        assert "runledger_advance_cursors" not in beat.log()
    finally:
        beat.stop()
        worker.stop()
        delete_queue(amqp_url, queue)
    # Beat's cursor moves (through runledger_advance_cursors) are not changes; the CLI's add is.
    assert [e["operation"] for e in api.audit(db, "priv")] == ["INSERT"]
    paused = _cli(cli_dsn, schema, "pause", "priv")
    history = _cli(cli_dsn, schema, "history", "priv", "--json")
    assert paused.returncode == 0 and history.returncode == 0, paused.stderr + history.stderr
    assert any(job["status"] == "success" for job in json.loads(history.stdout))
    removed = _cli(cli_dsn, schema, "remove", "priv")
    assert removed.returncode == 0, removed.stderr


def test_migrate_without_create_is_a_read_only_no_op(pg_dsn, schema, roles):
    with connect(role_dsn(pg_dsn, roles["beat"]), schema) as conn:
        assert migrate(conn, schema) == []
        assert check_version(conn, schema) == KNOWN and schema_ready(conn, schema)


def test_up_to_date_migrate_takes_no_lock(pg_dsn, schema, admin_db):
    admin_db.execute("BEGIN")
    admin_db.execute(queries.migrate_lock, {"schema": schema})  # another process mid-migration holds the lock
    try:
        result: list = []
        with connect(pg_dsn, schema) as conn:
            thread = threading.Thread(target=lambda: result.append(migrate(conn, schema)), daemon=True)
            started = time.monotonic()
            thread.start()
            thread.join(5)
        assert result == [[]] and time.monotonic() - started < 5
    finally:
        admin_db.execute("ROLLBACK")


def _mark_newer(db: psycopg.Connection) -> None:
    db.execute(queries.record_migration, {"version": 999, "name": "0999_future.sql"})


def test_newer_database_is_refused_in_one_line(pg_dsn, schema, db):
    _mark_newer(db)
    with connect(pg_dsn, "public") as conn:
        for check in (migrate, check_version, schema_ready):
            with pytest.raises(ConfigError) as info:
                check(conn, schema)
            assert str(info.value) == NEWER_LINE


def test_the_command_line_refuses_a_newer_database_in_one_line(pg_dsn, schema, db):
    _mark_newer(db)
    for command in ("list", "migrate"):
        done = _cli(pg_dsn, schema, command)
        assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [f"error: {NEWER_LINE}"]), command


@pytest.mark.parametrize("auto_migrate", [True, False], ids=["auto-migrate", "no-auto-migrate"])
def test_beat_exits_1_on_a_newer_database(pg_dsn, schema, db, amqp_url, auto_migrate):
    _mark_newer(db)
    env, queue = prepare(db, pg_dsn, schema, amqp_url, extra={"runledger_auto_migrate": auto_migrate})
    beat = start_beat(env, "newer-beat")
    try:
        wait_for(lambda: not beat.alive(), timeout=30, interval=0.2, message="beat to exit")
        log = beat.log()
        assert beat.popen.returncode == 1, log
        assert log.count(NEWER_LINE) == 1, log
        assert "Traceback" not in log, log
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)


def test_check_functions_grant_execute_explicitly(db, schema):
    # CHECK constraints run their functions as the writing role: EXECUTE is granted in the migration itself, so
    # an install whose default privileges revoke EXECUTE from PUBLIC still lets limited roles write schedules.
    rows = db.execute("SELECT proname, proacl::text[] AS acl FROM pg_proc WHERE pronamespace = %s::regnamespace"
                      " AND proname LIKE 'runledger\\_%%\\_valid' ORDER BY proname", (schema,)).fetchall()
    assert [r["proname"] for r in rows] == ["runledger_options_valid", "runledger_template_valid"]
    assert all(any(entry.startswith("=X/") for entry in r["acl"]) for r in rows)


def _callers(db: psycopg.Connection, schema: str) -> dict[str, dict]:
    """Each function of the schema run with its owner's rights (or the owner's maintenance form): who besides its
    owner may EXECUTE it, and its pinned settings."""
    rows = db.execute(
        "SELECT p.oid::regprocedure::text AS fn, p.prosecdef AS definer, p.proconfig AS config,"
        "       coalesce(array_agg(CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee)::text END"
        "                          ORDER BY a.grantee)"
        "                FILTER (WHERE a.grantee <> p.proowner AND a.privilege_type = 'EXECUTE'), '{}') AS callers"
        "  FROM pg_proc p CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a"
        " WHERE p.pronamespace = %s::regnamespace AND (p.prosecdef OR p.proname = 'runledger_maintain_ledger_as_of')"
        " GROUP BY p.oid, p.prosecdef, p.proconfig", (schema,)).fetchall()
    return {r["fn"]: r for r in rows}


def test_definer_functions_run_only_for_the_roles_granted_them(db, schema, roles):
    found = _callers(db, schema)
    assert {fn: set(r["callers"]) for fn, r in found.items()} == {
        "runledger_advance_cursors(uuid[],timestamp with time zone[],boolean[])": {roles["beat"]},
        "runledger_maintain_ledger(interval,integer)": {roles["beat"]},
        "runledger_audit_schedules()": set(),  # trigger functions: nobody may attach them anywhere
        "runledger_audit_truncate()": set(),
        "runledger_maintain_ledger_as_of(interval,integer,timestamp with time zone)": set(),
    }
    assert not found["runledger_maintain_ledger_as_of(interval,integer,timestamp with time zone)"]["definer"]
    for fn, row in found.items():
        assert any(setting.startswith("search_path=") for setting in row["config"] or []), fn


def test_the_audit_triggers_still_fire_for_writers_without_execute(pg_dsn, schema, db, roles):
    """EXECUTE is checked when a trigger is created, not when it fires: revoking it from PUBLIC audits as before."""
    cli_dsn = role_dsn(pg_dsn, roles["cli"])
    api.create(cli_dsn, "audited", "rl.record", every=60, schema=schema)
    api.update(cli_dsn, "audited", every=120, schema=schema)
    with connect(cli_dsn, schema, autocommit=True) as cli:
        cli.execute("DELETE FROM job_schedules WHERE name = 'audited'")  # raw SQL
    assert [(e["operation"], e["who"]) for e in api.audit(db, "audited")] == [
        ("INSERT", roles["cli"]), ("UPDATE", roles["cli"]), ("DELETE", roles["cli"])]


def test_a_beat_role_without_the_cursor_grant_is_audited_and_told_once(pg_dsn, schema, db, roles, amqp_url):
    """An upgraded install whose beat role lacks EXECUTE on runledger_advance_cursors: beat works, its cursor moves
    are plain UPDATEs the audit log records, and it says once which GRANT to add."""
    db.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {}.runledger_advance_cursors FROM {}").format(
        sql.Identifier(schema), sql.Identifier(roles["beat"])))
    insert_schedule(db, "every-second", cron="* * * * * *")
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    beat = start_beat(celery_env(role_dsn(pg_dsn, roles["beat"]), schema, amqp_url, queue), "fallback-beat")
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'sent'").fetchone()["n"] >= 3,
                 timeout=45, interval=0.3, message=f"three fires\nBEAT:\n{beat.log()}")
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
    log = beat.log()
    grant = (f"GRANT EXECUTE ON FUNCTION {schema}.runledger_advance_cursors(uuid[], timestamptz[], boolean[]) "
             f"TO {roles['beat']}")
    assert log.count("may not EXECUTE") == 1 and grant in log, log
    moves = [e for e in api.audit(db, "every-second") if e["operation"] == "UPDATE"]
    fired = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
    assert len(moves) == fired >= 3
    assert all(e["who"] == roles["beat"] and "next_fire_at" in e["after"] for e in moves)


OLD_BEAT_GRANTS = ["GRANT USAGE ON SCHEMA {schema} TO {role}",
                   "GRANT EXECUTE ON FUNCTION {schema}.runledger_maintain_ledger TO {role}"]


def test_an_upgrade_keeps_beats_maintenance_and_takes_away_the_rest(pg_dsn):
    """A schema at migration 7 with the grants the README gave beat before: after 0008 beat's role may maintain
    the ledger (as of now only), and nobody but the owner may call any other definer function."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with connect(pg_dsn, "public", autocommit=False) as conn:
        migrate(conn, schema, until=7)
    try:
        with connect(pg_dsn, schema, autocommit=True) as db:
            role = f"rl_old_beat_{uuid.uuid4().hex[:8]}"
            db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            try:
                for statement in OLD_BEAT_GRANTS:
                    db.execute(sql.SQL(statement).format(schema=sql.Identifier(schema), role=sql.Identifier(role)))
                assert "PUBLIC" in _callers(db, schema)["runledger_audit_schedules()"]["callers"]
                with connect(pg_dsn, "public", autocommit=False) as conn:
                    assert migrate(conn, schema, until=8) == ["0008_least_privilege.sql"]
                assert {fn: set(r["callers"]) for fn, r in _callers(db, schema).items()} == {
                    "runledger_advance_cursors(uuid[],timestamp with time zone[],boolean[])": set(),
                    "runledger_maintain_ledger(interval,integer)": {role},
                    "runledger_audit_schedules()": set(),
                    "runledger_audit_truncate()": set(),
                    "runledger_maintain_ledger_as_of(interval,integer,timestamp with time zone)": set(),
                }
                with connect(role_dsn(pg_dsn, role), schema, autocommit=True) as beat:
                    assert BeatStore(beat).maintain_ledger(None) == []  # allowed, and nothing left to create
                    assert BeatStore(beat).cursor_function_state() == {"present": True, "allowed": False}
            finally:
                db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    finally:
        with connect(pg_dsn, "public", autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def test_dashboard_roles_read_and_change_only_what_their_grants_say(pg_dsn, schema, db, roles):
    sid = api.create(db, "dash", "rl.record", cron="*/10 * * * *", args=["nightly"])["id"]
    reader, writer = role_dsn(pg_dsn, roles["dashboard"]), role_dsn(pg_dsn, roles["dashboard-writer"])
    with connect(reader, schema, autocommit=True) as conn:  # what the pages read
        store = OpsStore(conn)
        assert [s["name"] for s in api.list_schedules(conn)] == ["dash"]
        assert api.get(conn, "dash")["task"] == "rl.record" and len(api.next_fires(conn, "dash", 3)) == 3
        assert api.history(conn, "dash") == [] and store.lag_series(sid, 100) == []
        assert store.last_fires([sid]) == {} and store.beats() == []
        assert store.faulted_schedules(100) == [] and store.failed_jobs(100) == []
        page = schedule_page(conn, q="das")
        assert [r["name"] for r in page.rows] == ["dash"] and page.after is None
        assert [len(f) for f in next_fires(conn, page.rows, 3).values()] == [3]
        assert schedule_count(conn) == (1, True) and stats(conn) == []
    for write in (lambda: api.pause(reader, "dash", schema=schema), lambda: api.trigger(reader, "dash", schema=schema)):
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            write()
    assert api.pause(writer, "dash", note="maintenance", schema=schema)["pause_note"] == "maintenance"
    assert api.resume(writer, "dash", schema=schema)["active"] is True
    assert api.trigger(writer, "dash", schema=schema)["status"] == "pending"
    done = api.backfill(writer, "dash", "2026-01-01T00:00:00Z", "2026-01-01T00:30:00Z", schema=schema)
    assert done["created"] == 3
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        api.update(writer, "dash", task="rl.evil", schema=schema)
    with pytest.raises(psycopg.errors.InsufficientPrivilege), connect(writer, schema, autocommit=True) as conn:
        conn.execute("UPDATE job_schedules SET payload_template = '{\"args\": [\"pwned\"], \"kwargs\": {}}'")
    row = api.get(db, "dash")
    assert (row["task"], row["args"]) == ("rl.record", ["nightly"])


def test_grants_prints_each_kind_for_a_role_and_refuses_bad_names():
    for kind in KINDS:
        done = subprocess.run([str(CLI), "grants", kind, "ops role", "--schema", "my_schema"], capture_output=True,
                              text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 0 and done.stdout == render(kind, "ops role", "my_schema") + "\n", done.stderr
        assert '"my_schema"' in done.stdout and '"ops role"' in done.stdout
    for role, reason in (("public", "PUBLIC is every role"), ("x" * 64, "longer than 63 bytes"), ("", "give")):
        done = subprocess.run([str(CLI), "grants", "beat", role], capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert done.returncode == 2 and done.stderr.startswith(f"error: role: {reason}"), done.stderr
    done = subprocess.run([str(CLI), "grants", "beat", "r", "--schema", "x; DROP TABLE t"], capture_output=True,
                          text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2 and "runledger_schema" in done.stderr and not done.stdout


def test_the_security_page_shows_what_grants_prints():
    readme = (ROOT / "docs" / "security.md").read_text()
    for kind in KINDS:
        role = "runledger_" + kind.replace("-", "_")
        assert f"$ runledger-beat grants {kind} {role}\n{render(kind, role)}\n" in readme, kind
