"""Overlap policies buffer_one and cancel_other with a real beat and real prefork workers (rl.sleepy)."""

from __future__ import annotations

import uuid

import pytest

from runledger_beat import api
from runledger_beat.beat.claim import run_pass
from runledger_beat.db.beat_store import BeatStore
from runledger_beat.importer import entry_columns

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat, start_worker
from ..support.rows import insert_schedule
from ..support.services import wait_for


def _story(db, sid) -> list[dict]:
    return db.execute("SELECT id, scheduled_for, status, last_error, released_at, started_at, finished_at"
                      " FROM jobs WHERE schedule_id = %s ORDER BY scheduled_for", (sid,)).fetchall()


@pytest.mark.slow(seconds=15)
def test_buffer_one_runs_exactly_one_waiting_fire_right_after_each_live_run(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True)
    sid = insert_schedule(db, "buffered", cron="* * * * * *", overlap="buffer_one", task="rl.sleepy",
                          template={"args": ["buffered", 2.5], "kwargs": {}})
    beat, worker = start_beat(env), start_worker(env, concurrency=2)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions WHERE finished_at IS NOT NULL") >= 3,
                 timeout=40, message="three finished runs")
        db.execute("UPDATE job_schedules SET is_active = false")
        runs = db.execute("SELECT task_id, at, finished_at FROM executions ORDER BY at").fetchall()
        story = _story(db, sid)  # before the workers stop (a run cut short by the shutdown fails)
    finally:
        beat.stop()
        worker.stop()
        delete_queue(amqp_url, queue)
    by_id = {str(r["id"]): r for r in story}
    finished = [r for r in runs if r["finished_at"] is not None]
    for a, b in zip(runs, runs[1:], strict=False):
        assert a["finished_at"] is not None and b["at"] >= a["finished_at"], "two runs overlapped"
        # The next run is the buffered fire, released by the worker hook as the live run ended.
        assert (b["at"] - a["finished_at"]).total_seconds() < 1.5
        assert by_id[b["task_id"]]["released_at"] is not None
        assert by_id[b["task_id"]]["scheduled_for"] < a["finished_at"]  # it had been waiting
    assert len(finished) >= 3
    # The ledger tells the story: one success per run, the fire that waited went out after the run before it,
    # every other fire meanwhile was skipped; never two waiting at once.
    assert [by_id[r["task_id"]]["status"] for r in finished] == ["success"] * len(finished)
    skipped = [r for r in story if r["status"] == "skipped"]
    assert skipped and all(r["last_error"] == "overlap: a later fire is already waiting (buffer_one)"
                           for r in skipped)
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'buffered'") <= 1
    # In slot order: run, the one fire that waited for it (released), the fires skipped meanwhile, and so on.
    ran = {r["task_id"] for r in runs}
    order = ["ran" if str(r["id"]) in ran else r["status"] for r in story]
    assert order[:2] == ["ran", "ran"], order
    # In flight when the ledger was read: a fire still waiting, sent, or started after the runs were read.
    assert set(order) <= {"ran", "skipped", "buffered", "pending", "sent", "started"}, order
    executed = [r for r in story if str(r["id"]) in ran]
    assert executed[0]["released_at"] is None and all(r["released_at"] for r in executed[1:])


@pytest.mark.slow(seconds=20)
def test_cancel_other_revokes_and_replaces_the_live_run(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True)
    api.create(db, "replace", "rl.sleepy", every=3, args=["replace", 60], overlap="cancel_other",
               overlap_terminate=True)
    sid = api.get(db, "replace")["id"]
    # One worker process: a later fire can only run if the live one was terminated.
    beat, worker = start_beat(env), start_worker(env, concurrency=1)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") >= 3, timeout=40,
                 message="three runs, each replacing the one before")
        db.execute("UPDATE job_schedules SET is_active = false")
        runs = db.execute("SELECT task_id, at, finished_at FROM executions ORDER BY at").fetchall()
        wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s", (runs[1]["task_id"],))
                 .fetchone()["status"] == "revoked", timeout=10, message="the second run to be revoked")
        story = _story(db, sid)
    finally:
        beat.stop()
        worker.stop()
        delete_queue(amqp_url, queue)
    assert all(r["finished_at"] is None for r in runs)  # none ran its 60 s to the end
    by_id = {str(r["id"]): r for r in story}
    for a, b in zip(runs, runs[1:], strict=False):
        assert by_id[a["task_id"]]["status"] == "revoked"
        assert by_id[a["task_id"]]["last_error"] == "overlap: cancelled by a later fire (cancel_other)"
        assert by_id[a["task_id"]]["scheduled_for"] < by_id[b["task_id"]]["scheduled_for"]
    # In slot order: every fire but the newest was revoked by the one after it.
    statuses = [r["status"] for r in story]
    assert statuses[:-1] == ["revoked"] * (len(statuses) - 1) and statuses[-1] in ("pending", "sent", "started")
    assert "terminate" in beat.log()


def test_buffer_one_in_the_ledger_without_a_worker(db):
    sid = insert_schedule(db, "b", cron="* * * * * *", overlap="buffer_one")
    live = uuid.uuid4()
    db.execute("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload, status)"
               " VALUES (%s, %s, now() - interval '1 minute', 'rl.record', '{}', 'started')", (live, sid))
    store = BeatStore(db)
    for _ in range(2):
        assert run_pass(store, 10).fires == []
        db.execute("UPDATE job_schedules SET next_fire_at = now() WHERE id = %s", (sid,))
    assert [r["status"] for r in _story(db, sid)] == ["started", "buffered", "skipped"]
    assert store.release_buffered() == []  # the run is still live
    db.execute("UPDATE jobs SET status = 'success' WHERE id = %s", (live,))
    (released,) = store.release_buffered()
    assert [r["status"] for r in _story(db, sid)] == ["success", "pending", "skipped"]
    claimed = store.claim_pending(grace=3600, limit=10)  # released fires go out at once
    assert [r["id"] for r in claimed] == [released["id"]]


def test_overlap_policies_in_the_api_cli_and_beat_schedule_import(capsys, db, pg_dsn, schema):
    from celery import Celery

    from runledger_beat import cli
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "add", "c1", "--task", "t.x", "--every", "5s",
                     "--overlap", "cancel_other", "--overlap-terminate", "--json"])
    out = capsys.readouterr().out
    assert code == 0 and '"overlap": "cancel_other"' in out and '"overlap_terminate": true' in out
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "update", "c1", "--overlap", "queue"]) == 2
    assert "error: overlap: unknown value 'queue'" in capsys.readouterr().err
    row = api.create(db, "b1", "t.x", every=5, overlap="buffer_one")
    assert row["overlap"] == "buffer_one" and row["overlap_terminate"] is False
    assert api.update(db, "b1", overlap="cancel_other", overlap_terminate=True)["overlap_terminate"] is True
    app = Celery("imp")
    cols = entry_columns(app, "nightly", {"task": "t.x", "schedule": 60.0,
                                          "options": {"overlap": "buffer_one", "queue": "q"}})
    assert cols["overlap_policy"] == "buffer_one" and cols["options"] == {"queue": "q"}
    db.execute("UPDATE job_schedules SET overlap_policy = 'cancel_other' WHERE name = 'b1'")  # raw SQL may too
