"""Many beats, crashes, broker and database outages: real processes, real services."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta

import psycopg
import pytest

from runledger_beat.db import connect, migrate

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import ROOT, start_beat, start_worker
from ..support.rows import insert_schedule
from ..support.services import wait_for

pytestmark = pytest.mark.slow


def _db_now(db):
    return db.execute("SELECT now() AS now").fetchone()["now"]


@pytest.mark.serial
def test_three_beats_fire_each_slot_exactly_once(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beats = [start_beat(env, f"beat{i}") for i in range(3)]
    worker = start_worker(env, concurrency=4)
    try:
        # The window opens once the three beats tick, so their start-up eats none of it.
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM beats") == 3, timeout=60, message="three beats")
        start = db.execute("SELECT date_trunc('second', now()) + interval '2 seconds' AS t").fetchone()["t"]
        ids = [insert_schedule(db, f"ha{i:02d}", cron="* * * * * *", next_fire_at=start) for i in range(50)]
        duration = 15
        wait_for(lambda: _db_now(db) > start + timedelta(seconds=duration), timeout=duration + 15,
                 interval=0.5, message="the test window to pass")
        db.execute("UPDATE job_schedules SET is_active = false")
        end = start + timedelta(seconds=duration)
        assert count(db, "SELECT count(*) AS n FROM (SELECT schedule_id, scheduled_for, count(*) FROM jobs"
                         " GROUP BY 1, 2 HAVING count(*) > 1) d") == 0
        for sid in ids:
            slots = [r["scheduled_for"] for r in db.execute(
                "SELECT scheduled_for FROM jobs WHERE schedule_id = %s AND scheduled_for < %s ORDER BY 1",
                (sid, end)).fetchall()]
            assert slots == [start + timedelta(seconds=k) for k in range(duration)], f"missed slots for {sid}"
        fired = count(db, "SELECT count(*) AS n FROM jobs")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") >= fired, timeout=60,
                 message="every fire executed")
        assert count(db, "SELECT count(*) AS n FROM executions") == fired
        assert count(db, "SELECT count(DISTINCT task_id) AS n FROM executions") == fired
        # more than one beat did real work
        assert all(b.alive() for b in beats)
    finally:
        for b in beats:
            b.stop()
        worker.stop()
        delete_queue(amqp_url, queue)


def test_beat_killed_between_commit_and_publish_is_recovered(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, extra={"runledger_recovery_grace": 2})
    crashing_env = dict(env)
    crashing_env["RL_EXTRA"] = '{"runledger_recovery_grace": 2}'
    crashing_env["RL_CRASH_POINT"] = "after_commit"
    sid = insert_schedule(db, "crash", cron="* * * * * *")
    crasher = start_beat(crashing_env, "crasher", scheduler="tests.support.crashing:Scheduler")
    try:
        wait_for(lambda: not crasher.alive(), timeout=20, message="the beat to die at the fault point")
        assert crasher.popen.returncode == -9
        (row,) = db.execute("SELECT * FROM jobs WHERE schedule_id = %s", (sid,)).fetchall()
        assert row["status"] == "pending" and row["sent_at"] is None
        db.execute("UPDATE job_schedules SET is_active = false")
        survivor, worker = start_beat(env, "survivor"), start_worker(env)
        try:
            wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions WHERE task_id = %s", str(row["id"])) == 1,
                     timeout=30, message="the orphaned fire to be republished and run")
            after = db.execute("SELECT status, dispatch_attempts FROM jobs WHERE id = %s", (row["id"],)).fetchone()
            assert after["status"] == "sent" and after["dispatch_attempts"] == 1
        finally:
            survivor.stop()
            worker.stop()
    finally:
        crasher.stop()
        delete_queue(amqp_url, queue)


def test_broker_outage_loses_nothing(db, pg_dsn, schema, private_rabbit):
    amqp_url = private_rabbit.url
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    sid = insert_schedule(db, "outage", cron="* * * * * *")
    beat = start_beat(env)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") >= 2, timeout=20,
                 message="fires before the outage")
        private_rabbit.stop_app()
        try:
            before = count(db, "SELECT count(*) AS n FROM jobs")
            wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs") >= before + 15, timeout=40,
                     message="fires recorded while the broker is down")
            assert count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'") >= 10
            assert beat.alive()
        finally:
            private_rabbit.start_app()
        db.execute("UPDATE job_schedules SET is_active = false")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'") == 0, timeout=60,
                 message="the backlog to be delivered")
        worker = start_worker(env)
        try:
            total = count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_id = %s", sid)
            wait_for(lambda: count(db, "SELECT count(DISTINCT task_id) AS n FROM executions") == total, timeout=60,
                     message="every recorded fire executed")
        finally:
            worker.stop()
        assert beat.alive(), beat.log()
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)


def test_postgres_restart_under_a_running_beat(private_postgres, amqp_url):
    pg_dsn, schema = private_postgres.dsn, "runledger"
    with connect(pg_dsn, "public") as conn:
        migrate(conn, schema)
    conn = connect(pg_dsn, schema, autocommit=True)
    env, queue = prepare(conn, pg_dsn, schema, amqp_url)
    insert_schedule(conn, "pg", cron="* * * * * *")
    conn.close()
    beat = start_beat(env)
    try:
        def fires() -> int:
            try:
                with connect(pg_dsn, schema, autocommit=True) as c:
                    return count(c, "SELECT count(*) AS n FROM jobs")
            except psycopg.OperationalError:
                return 0
        wait_for(lambda: fires() >= 2, timeout=20, message="fires before the restart")
        private_postgres.restart()
        base = wait_for(fires, timeout=30, message="Postgres back")
        wait_for(lambda: fires() >= base + 3, timeout=30, message="fires after the restart")
        with connect(pg_dsn, schema, autocommit=True) as c:
            assert count(c, "SELECT count(*) AS n FROM (SELECT scheduled_for FROM jobs GROUP BY 1"
                            " HAVING count(*) > 1) d") == 0
        assert beat.alive()
        assert "Postgres unavailable" in beat.log()
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)


def _beat_once(env: dict, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "celery", "-A", "tests.support.celeryapp", "beat", "-S", "runledger",
                           "--pidfile="], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("case", ["no_dsn", "unreachable", "missing_schema"])
def test_bad_settings_exit_with_one_clear_line(case, pg_dsn, schema, amqp_url):
    env, _ = prepare(connect(pg_dsn, schema, autocommit=True), pg_dsn, schema, amqp_url)
    if case == "no_dsn":
        env.pop("RUNLEDGER_DSN")
        expected = "runledger_dsn: not set"
    elif case == "unreachable":
        env["RUNLEDGER_DSN"] = "postgresql://someone:s3cret-pass@127.0.0.1:1/nope?connect_timeout=2"
        expected = "cannot use Postgres at postgresql://someone:***@127.0.0.1:1/nope"
    else:
        env["RL_SCHEMA"] = "no_such_schema_here"
        env["RL_EXTRA"] = '{"runledger_auto_migrate": false}'
        expected = "has no runledger tables and runledger_auto_migrate is off"
    out = _beat_once(env)
    text = out.stdout + out.stderr
    assert out.returncode != 0
    lines = [line for line in text.splitlines() if "runledger_beat:" in line]
    assert len(lines) == 1 and expected in lines[0], text[-2000:]
    assert "s3cret-pass" not in text
    assert "Traceback" not in text
