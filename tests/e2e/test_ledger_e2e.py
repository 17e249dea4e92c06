"""The ledger follows runs end to end: real beat, real prefork workers with the hook, real Flower."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import urllib.request

import pytest

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import ROOT, Proc, start_beat, start_worker
from ..support.rows import insert_schedule
from ..support.services import missing, wait_for


@pytest.mark.slow(seconds=15)
def test_overlap_skip_never_runs_two_at_once(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True)
    insert_schedule(db, "slow", cron="* * * * * *", overlap="skip", template={"args": ["slow", 3.5], "kwargs": {}},
                    task="rl.sleepy")
    beat, worker = start_beat(env), start_worker(env, concurrency=2)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions WHERE finished_at IS NOT NULL") >= 2,
                 timeout=40, message="two finished runs")
        db.execute("UPDATE job_schedules SET is_active = false")
        runs = db.execute("SELECT at, finished_at FROM executions WHERE finished_at IS NOT NULL ORDER BY at").fetchall()
        for a, b in zip(runs, runs[1:], strict=False):
            assert b["at"] >= a["finished_at"], "two runs overlapped"
        assert count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'skipped'"
                         " AND last_error LIKE 'overlap:%%'") >= 4
    finally:
        beat.stop()
        worker.stop()
        delete_queue(amqp_url, queue)


@pytest.mark.slow(seconds=15)
def test_duplicate_delivery_after_beat_killed_before_marking_sent_runs_once(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True, extra={"runledger_recovery_grace": 2})
    crash_env = dict(env, RL_EXTRA='{"runledger_recovery_grace": 2}', RL_CRASH_POINT="after_publish")
    sid = insert_schedule(db, "dup", cron="* * * * * *")
    crasher = start_beat(crash_env, "crasher", scheduler="tests.support.crashing:Scheduler")
    worker = None
    try:
        wait_for(lambda: not crasher.alive(), timeout=20, message="beat to die after publishing")
        db.execute("UPDATE job_schedules SET is_active = false")
        (row,) = db.execute("SELECT id, status FROM jobs WHERE schedule_id = %s", (sid,)).fetchall()
        assert row["status"] == "pending"  # published, never marked sent
        survivor = start_beat(env, "survivor")  # its sweep republishes the pending row: a second message
        try:
            wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s",
                                        (row["id"],)).fetchone()["status"] == "sent",
                     timeout=30, message="the sweep to republish the fire")
        finally:
            survivor.stop()
        worker = start_worker(env)
        wait_for(lambda: db.execute("SELECT duplicates FROM jobs WHERE id = %s",
                                    (row["id"],)).fetchone()["duplicates"] == 1,
                 timeout=30, message="the duplicate delivery to be suppressed")
        assert "duplicate delivery of" in worker.log()
        # The two deliveries run side by side (-c 2): the suppressed one may be counted before the real run ends.
        wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s", (row["id"],)).fetchone()["status"]
                 == "success", timeout=30, message="the one real run to succeed")
        assert count(db, "SELECT count(*) AS n FROM executions") == 1
    finally:
        crasher.stop()
        if worker:
            worker.stop()
        delete_queue(amqp_url, queue)


@pytest.mark.slow(seconds=15)
def test_worker_killed_mid_task_is_marked_lost_and_skip_schedule_fires_again(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True, extra={"runledger_lost_after": 3})
    sid = insert_schedule(db, "long", cron="* * * * * *", overlap="skip", task="rl.sleepy",
                          template={"args": ["long", 60], "kwargs": {}})
    beat, worker = start_beat(env), start_worker(env, concurrency=1)
    second = None
    try:
        first = wait_for(lambda: db.execute("SELECT id FROM jobs WHERE schedule_id = %s AND status = 'started'",
                                            (sid,)).fetchone(), timeout=30, message="a started run")
        worker.kill(signal.SIGKILL)
        worker.popen.wait(10)
        wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s",
                                    (first["id"],)).fetchone()["status"] == "lost",
                 timeout=30, message="the run to be marked lost")
        second = start_worker(env, "worker2", concurrency=1)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_id = %s AND status = 'started'"
                                   " AND id <> %s", sid, first["id"]) >= 1,
                 timeout=30, message="the schedule to fire again")
    finally:
        beat.stop()
        worker.stop()
        if second:
            second.stop()
        delete_queue(amqp_url, queue)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: Where scripts/test installs Flower: on the path of this test's Flower process only (pyproject.toml, dev extra).
FLOWER = ROOT / ".venv" / "flower"


def test_flower_lists_fires_under_ledger_ids(db, pg_dsn, schema, amqp_url):
    if not (FLOWER / "flower").is_dir():
        missing("Flower", f"not installed in {FLOWER} (scripts/test installs it)")
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True)
    port = _free_port()
    flower = Proc([sys.executable, "-m", "celery", "-A", "tests.support.celeryapp", "flower", f"--port={port}",
                   "--address=127.0.0.1"],
                  dict(env, FLOWER_UNAUTHENTICATED_API="true", PYTHONPATH=f"{FLOWER}{os.pathsep}{env['PYTHONPATH']}"),
                  "flower")
    beat = worker = None
    try:
        def tasks():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/tasks", timeout=2) as r:
                    return json.load(r)
            except OSError:
                return None
        wait_for(lambda: tasks() is not None, timeout=30, message="Flower's API")
        insert_schedule(db, "flowered", cron="* * * * * *")
        beat, worker = start_beat(env), start_worker(env)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") >= 2, timeout=30, message="runs")
        ledger_ids = {str(r["id"]) for r in db.execute("SELECT id FROM jobs WHERE sent_at IS NOT NULL").fetchall()}
        listed = wait_for(lambda: {k: v for k, v in (tasks() or {}).items() if k in ledger_ids} or None, timeout=20,
                          message="ledger ids in Flower")
        assert all(t["name"] == "rl.record" for t in listed.values())
        assert any("flowered" in (t.get("args") or "") for t in listed.values())
    finally:
        for p in (beat, worker, flower):
            if p:
                p.stop()
        delete_queue(amqp_url, queue)
