"""The pytest plugin and runledger_beat.testing.run_due: the entry point, the documented example, both send paths."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from celery import Celery
from kombu import Connection

from runledger_beat import api
from runledger_beat.testing import run_due

from ..support.procs import ROOT
from ..support.rows import insert_schedule


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


def test_the_testing_page_shows_tests_db_test_plugin_usage_exactly():
    page = (ROOT / "docs" / "testing.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert (ROOT / "tests/db/test_plugin_usage.py").read_text() in blocks


def test_the_entry_point_serves_the_fixtures_to_a_project_of_its_own(tmp_path, pg_dsn):
    shutil.copy(ROOT / "tests/db/test_plugin_usage.py", tmp_path / "test_schedules.py")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["RUNLEDGER_TEST_DSN"] = pg_dsn
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
                           str(tmp_path), "test_schedules.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_runledger_dsn_puts_the_test_schema_first(runledger_dsn, runledger_schema):
    with psycopg.connect(runledger_dsn) as conn:
        assert conn.execute("SELECT current_schema()").fetchone()[0] == runledger_schema
        assert conn.execute("SELECT count(*) FROM job_schedules").fetchone()[0] == 0


def test_run_due_publishes_through_send_task_with_the_ledger_id(db, pg_dsn, schema, amqp_url):
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    app = Celery("sent", broker=amqp_url, set_as_current=False)
    app.conf.task_default_queue = queue
    api.create(db, "hourly", "proj.hourly", cron="0 * * * *", args=[1], kwargs={"x": 2}, start=utc(2031, 1, 1),
               schema=schema)
    try:
        (row,) = run_due(app, pg_dsn, utc(2031, 1, 1, 0, 0, 30), schema=schema)
        assert row["status"] == "sent" and row["task"] == "proj.hourly" and row["scheduled_for"] == utc(2031, 1, 1)
        with Connection(amqp_url) as conn:
            message = conn.SimpleQueue(queue).get(timeout=5)
            message.ack()
        assert message.headers["id"] == row["id"] and message.headers["task"] == "proj.hourly"
        assert message.headers["runledger_id"] == row["id"]
        assert message.headers["_schedule"]["schedule_name"] == "hourly"
        args, kwargs, _ = message.decode()
        assert args == [1] and kwargs == {"x": 2}
        # The cursor moved past `at`, to the next slot: a second pass at the same clock fires nothing.
        assert api.get(db, "hourly", schema=schema)["next_fire_at"] == utc(2031, 1, 1, 1)
        assert run_due(app, pg_dsn, utc(2031, 1, 1, 0, 0, 30), schema=schema) == []
    finally:
        with Connection(amqp_url) as conn:
            conn.default_channel.queue_delete(queue)


def test_run_due_returns_skipped_fires_and_leaves_bad_rows_deferred(db, pg_dsn, schema):
    app = Celery("eager", set_as_current=False)
    app.conf.task_always_eager = True
    seen = []

    @app.task(name="t.seen")
    def seen_task(label):
        seen.append(label)

    at = utc(2031, 6, 1, 12)
    insert_schedule(db, "missed", task="t.seen", cron="0 0 1 1 *", next_fire_at=at - timedelta(hours=2))
    db.execute("UPDATE job_schedules SET misfire_policy = 'skip' WHERE name = 'missed'")
    insert_schedule(db, "due", task="t.seen", cron="0 12 * * *", next_fire_at=at)
    insert_schedule(db, "broken", task="t.seen", cron="0 12 * * *", next_fire_at=at, tz="Nowhere/Bogus")
    insert_schedule(db, "later", task="t.seen", cron="0 13 * * *", next_fire_at=at + timedelta(hours=1))
    rows = run_due(app, pg_dsn, at, schema=schema)
    assert [(r["schedule_name"], r["status"]) for r in rows] == [("missed", "skipped"), ("due", "sent")]
    assert seen == ["due"]
    assert api.get(db, "broken", schema=schema)["next_fire_at"] > datetime.now(timezone.utc)  # deferred


def test_run_due_wants_an_aware_instant(pg_dsn, schema):
    with pytest.raises(ValueError, match="timezone-aware"):
        run_due(Celery(set_as_current=False), pg_dsn, datetime(2031, 1, 1), schema=schema)


def test_runledger_dsn_alone_selects_the_test_schema_and_schema_still_wins(runledger_postgres, runledger_dsn,
                                                                          runledger_schema):
    app = Celery("alone", set_as_current=False)
    app.conf.task_always_eager = True

    @app.task(name="t.alone")
    def alone():
        return None

    api.create(runledger_dsn, "alone", "t.alone", every=60, start=utc(2031, 1, 1))
    with psycopg.connect(runledger_postgres) as conn:
        stored = conn.execute(psycopg.sql.SQL("SELECT name FROM {}.job_schedules").format(
            psycopg.sql.Identifier(runledger_schema))).fetchall()
    assert stored == [("alone",)]
    assert [r["schedule_name"] for r in run_due(app, runledger_dsn, utc(2031, 1, 1, 0, 1))] == ["alone"]
    assert [h["schedule_name"] for h in api.history(runledger_dsn, "alone")] == ["alone"]
    other = f"t_other_{uuid.uuid4().hex[:8]}"
    from runledger_beat.db import connect, drop_schema, migrate
    with connect(runledger_postgres, "public") as conn:
        migrate(conn, other)
    try:
        api.create(runledger_dsn, "elsewhere", "t.alone", every=60, schema=other)
        assert api.get(runledger_dsn, "elsewhere") is None
        assert api.get(runledger_dsn, "elsewhere", schema=other)["name"] == "elsewhere"
        fired = run_due(app, runledger_dsn, utc(2031, 1, 1, 0, 1), schema=other)
        assert [r["schedule_name"] for r in fired] == ["elsewhere"]
    finally:
        with connect(runledger_postgres, "public", autocommit=True) as conn:
            drop_schema(conn, other)
