"""Changes through the CLI reach a running `celery beat -S runledger` at once; the example project runs."""

from __future__ import annotations

import subprocess
import sys
import time

from runledger_beat import cli

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import ROOT, Proc, start_beat
from ..support.services import wait_for


def _cli(pg_dsn, schema, *argv) -> int:
    return cli.main(["--dsn", pg_dsn, "--schema", schema, *argv])


def _clock(db):
    return db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]


def _first_sent(db, name, after):
    return db.execute("SELECT scheduled_for, sent_at FROM jobs WHERE schedule_name = %s AND scheduled_for > %s"
                      " AND sent_at IS NOT NULL ORDER BY scheduled_for LIMIT 1", (name, after)).fetchone()


def test_cli_add_retime_pause_remove_reach_a_running_beat(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beat = start_beat(env)  # beat_max_loop_interval is 5 s: only NOTIFY can make it react within 1 s
    try:
        wait_for(lambda: "beat: Starting" in beat.log(), timeout=20, message="beat to start")
        # add
        added = _clock(db)
        assert _cli(pg_dsn, schema, "add", "live", "--task", "rl.record", "--cron", "* * * * * *",
                    "--args", '["live"]') == 0
        done = _clock(db)  # the first instant is the first whole second after the add's own clock read
        row = wait_for(lambda: _first_sent(db, "live", added), timeout=10, message="the added schedule's fire")
        assert (row["scheduled_for"] - done).total_seconds() <= 1.0
        assert (row["sent_at"] - row["scheduled_for"]).total_seconds() < 1.0
        # retime: a yearly schedule retimed to every second
        assert _cli(pg_dsn, schema, "add", "rare", "--task", "rl.record", "--cron", "0 0 1 1 *") == 0
        retimed = _clock(db)
        assert _cli(pg_dsn, schema, "update", "rare", "--cron", "* * * * * *") == 0
        done = _clock(db)
        row = wait_for(lambda: _first_sent(db, "rare", retimed), timeout=10, message="the retimed schedule's fire")
        assert (row["scheduled_for"] - done).total_seconds() <= 1.0
        assert (row["sent_at"] - row["scheduled_for"]).total_seconds() < 1.0
        # pause and remove: nothing scheduled more than a second later
        paused = _clock(db)
        assert _cli(pg_dsn, schema, "pause", "live") == 0
        assert _cli(pg_dsn, schema, "remove", "rare") == 0
        removed = _clock(db)
        time.sleep(2.5)  # a window in which a missed change would show as fires
        assert count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'live'"
                         " AND scheduled_for > %s + interval '1 second'", paused) == 0
        assert count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'rare'"
                         " AND scheduled_for > %s + interval '1 second'", removed) == 0
        assert beat.alive()
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)


def test_example_project_sync_fire_and_removal(db, pg_dsn, schema, amqp_url, capsys):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    env.update({"RUNLEDGER_SCHEMA": schema, "BROKER_URL": amqp_url, "PROJ_HEARTBEAT_SECONDS": "1"})
    code = subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--schema", schema, "--dsn", pg_dsn,
                           "sync", "--app", "examples.proj.celery"], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert code.returncode == 0, code.stderr
    rows = {r["name"]: r for r in db.execute("SELECT * FROM job_schedules").fetchall()}
    assert set(rows) == {"nightly-report", "heartbeat", "cleanup"}
    nightly = rows["nightly-report"]
    assert nightly["kind"] == "cron" and nightly["cron_day_and"] and nightly["timezone"] == "Europe/Berlin"
    assert nightly["options"]["queue"] == "reports" and nightly["payload_template"]["args"] == ["daily"]
    assert rows["heartbeat"]["interval_seconds"] == 1.0 and rows["cleanup"]["interval_seconds"] == 300.0
    assert all(r["source"] == "config" for r in rows.values())
    assert _cli(pg_dsn, schema, "add", "by-hand", "--task", "proj.ping", "--every", "1h") == 0
    argv = [sys.executable, "-m", "celery", "-A", "examples.proj.celery", "beat", "-S", "runledger", "--pidfile="]
    beat = Proc(argv, env, "example-beat")
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'heartbeat'"
                                   " AND status = 'sent'") >= 2, timeout=30, message="heartbeat fires")
    finally:
        beat.stop()
    env["PROJ_WITHOUT"] = "cleanup"
    beat = Proc(argv, env, "example-beat-2")
    try:
        wait_for(lambda: not db.execute("SELECT is_active FROM job_schedules"
                                        " WHERE name = 'cleanup'").fetchone()["is_active"],
                 timeout=30, message="the removed entry to be deactivated")
        active = {r["name"]: r["is_active"] for r in db.execute("SELECT name, is_active FROM job_schedules")}
        assert active == {"nightly-report": True, "heartbeat": True, "cleanup": False, "by-hand": True}
    finally:
        beat.stop()
        for q in ("celery", "reports"):
            delete_queue(amqp_url, q)
        delete_queue(amqp_url, queue)
