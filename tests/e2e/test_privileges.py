"""Least privilege: beat, workers and the CLI run with only the documented GRANTs; a newer database stops beat.

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

from runledger_beat.db import check_version, connect, migrate, migration_files, queries, schema_ready
from runledger_beat.errors import ConfigError

from ..support.e2e import delete_queue, prepare
from ..support.procs import EXECUTIONS_DDL, ROOT, celery_env, start_beat, start_worker
from ..support.services import wait_for

#: docs/security.md's GRANTs by role ({schema} and {role} filled in). Beat also reads schema_migrations (version check).
GRANTS = {
    "beat": ["GRANT USAGE ON SCHEMA {schema} TO {role}",
             "GRANT SELECT ON {schema}.schema_migrations TO {role}",
             "GRANT SELECT, INSERT, UPDATE ON {schema}.job_schedules, {schema}.jobs TO {role}",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.schedule_faults TO {role}",
             "GRANT SELECT ON {schema}.workers TO {role}",
             "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.beats TO {role}",
             "GRANT SELECT ON {schema}.calendars TO {role}",
             "GRANT SELECT, DELETE ON {schema}.schedule_changes TO {role}",
             "GRANT EXECUTE ON FUNCTION {schema}.runledger_maintain_ledger TO {role}"],
    "worker": ["GRANT USAGE ON SCHEMA {schema} TO {role}",
               "GRANT SELECT, UPDATE ON {schema}.jobs TO {role}",
               "GRANT SELECT, INSERT, UPDATE ON {schema}.workers TO {role}"],
    "cli": ["GRANT USAGE ON SCHEMA {schema} TO {role}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.job_schedules TO {role}",
            "GRANT SELECT, INSERT ON {schema}.jobs TO {role}",
            "GRANT SELECT, DELETE ON {schema}.schedule_faults TO {role}",
            "GRANT SELECT ON {schema}.beats TO {role}",
            "GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.calendars TO {role}",
            "GRANT SELECT ON {schema}.schedule_changes TO {role}"],
}
#: Only for the test tasks (tests/support/celeryapp.py records each execution in this table).
TEST_TASK_GRANTS = ["GRANT SELECT, INSERT, UPDATE ON {schema}.executions TO {role}",
                    "GRANT USAGE ON SEQUENCE {schema}.executions_n_seq TO {role}"]
CLI = Path(sys.executable).parent / "runledger-beat"
KNOWN = max(version for version, _, _ in migration_files())
NEWER_LINE = (f"runledger_schema: database is at migration 999 but this runledger_beat knows up to {KNOWN}; "
              "upgrade runledger_beat")


def _role_dsn(pg_dsn: str, role: str) -> str:
    """The test DSN with another user (trust auth lets any role log in)."""
    return psycopg.conninfo.make_conninfo(pg_dsn, user=role)


def _grant(admin: psycopg.Connection, statements: list[str], schema: str, role: str) -> None:
    for statement in statements:
        admin.execute(statement.format(schema=sql.Identifier(schema).as_string(admin), role=role))


@pytest.fixture
def roles(pg_dsn, schema, db):
    """Roles beat / worker / cli with only the documented GRANTs (plus the test tasks' table), dropped afterwards."""
    suffix = uuid.uuid4().hex[:8]
    names = {kind: f"rl_{kind}_{suffix}" for kind in GRANTS}
    db.execute(EXECUTIONS_DDL)
    admin = psycopg.connect(pg_dsn, autocommit=True)
    for kind, role in names.items():
        admin.execute(f"CREATE ROLE {role} LOGIN")
        _grant(admin, GRANTS[kind], schema, role)
    _grant(admin, TEST_TASK_GRANTS, schema, names["worker"])
    yield names
    for role in names.values():
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")
    admin.close()


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
    cli_dsn = _role_dsn(pg_dsn, roles["cli"])
    done = _cli(cli_dsn, schema, "add", "priv", "--task", "rl.record", "--every", "1s", "--args", '["priv"]', "--json")
    assert done.returncode == 0, done.stderr
    listed = _cli(cli_dsn, schema, "list", "--json")
    assert listed.returncode == 0 and [r["name"] for r in json.loads(listed.stdout)] == ["priv"]
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    week_on = (datetime.now(timezone.utc) + timedelta(days=7)).strftime("jobs_p%Y%m%d")
    db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(week_on)))  # the limited beat makes it again
    beat = start_beat(celery_env(_role_dsn(pg_dsn, roles["beat"]), schema, amqp_url, queue), "priv-beat")
    worker = start_worker(celery_env(_role_dsn(pg_dsn, roles["worker"]), schema, amqp_url, queue, hook=True),
                          "priv-worker", concurrency=1)
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'success'").fetchone()["n"] >= 2,
                 timeout=45, interval=0.3, message=f"fires to succeed\nBEAT:\n{beat.log()}\nWORKER:\n{worker.log()}")
        assert beat.alive() and worker.alive()
        assert "permission denied" not in beat.log() + worker.log()
        assert db.execute("SELECT to_regclass(%s) IS NOT NULL AS made", (week_on,)).fetchone()["made"], beat.log()
    finally:
        beat.stop()
        worker.stop()
        delete_queue(amqp_url, queue)
    paused = _cli(cli_dsn, schema, "pause", "priv")
    history = _cli(cli_dsn, schema, "history", "priv", "--json")
    assert paused.returncode == 0 and history.returncode == 0, paused.stderr + history.stderr
    assert any(job["status"] == "success" for job in json.loads(history.stdout))
    removed = _cli(cli_dsn, schema, "remove", "priv")
    assert removed.returncode == 0, removed.stderr


def test_migrate_without_create_is_a_read_only_no_op(pg_dsn, schema, roles):
    with connect(_role_dsn(pg_dsn, roles["beat"]), schema) as conn:
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
