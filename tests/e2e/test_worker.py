"""The worker hook against real Postgres and a real prefork `celery worker` over RabbitMQ."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import pytest

from runledger_beat.db.beat_store import BeatStore
from runledger_beat.ops.stats import parse_duration, stats
from runledger_beat.publish.fires import Fire
from runledger_beat.publish.message import send_fire

from ..support.procs import EXECUTIONS_DDL, celery_env, start_worker
from ..support.services import wait_for


def _insert_job(db, job_type: str, args: list, options: dict | None = None, status: str = "sent",
                name: str = "manual-test") -> uuid.UUID:
    job_id = uuid.uuid4()
    db.execute(
        "INSERT INTO jobs (id, schedule_name, scheduled_for, job_type, payload, options, stage, status, sent_at)"
        " VALUES (%s, %s, now(), %s, %s, %s, 'manual', %s, now())",
        (job_id, name, job_type, json.dumps({"args": args, "kwargs": {}}), json.dumps(options or {}), status))
    return job_id


def _row(db, job_id):
    return db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()


def _executions(db, job_id) -> int:
    return db.execute("SELECT count(*) AS n FROM executions WHERE task_id = %s", (str(job_id),)).fetchone()["n"]


@pytest.fixture
def celery_app(amqp_url):
    from ..support.celeryapp import app
    app.conf.broker_url = amqp_url
    return app


def test_worker_keeps_ledger_current(pg_dsn, schema, db, amqp_url, celery_app):
    """success, failure, autoretry then success, revoke, and a double delivery, on one prefork worker."""
    db.execute(EXECUTIONS_DDL)
    queue = f"rlw-{uuid.uuid4().hex[:10]}"
    hostname = f"{queue}@testhost"
    env = celery_env(pg_dsn, schema, amqp_url, queue, hook=True)
    worker = start_worker(env, name="ledger", concurrency=2, hostname=hostname)
    app = celery_app
    try:
        wait_for(lambda: not worker.alive() or app.control.ping(destination=[hostname], timeout=0.5),
                 timeout=20, message="worker ready")
        assert worker.alive(), worker.log()

        def fire(job_id, job_type, args):
            return Fire(job_id, None, "manual-test", job_type, {"args": args, "kwargs": {}}, {"queue": queue}, None)

        ok = _insert_job(db, "rl.record", ["ok"])
        bad = _insert_job(db, "rl.fail", ["bad"])
        flaky = _insert_job(db, "rl.flaky", ["flaky", 1])
        gone = _insert_job(db, "rl.record", ["gone"])
        twice = _insert_job(db, "rl.record", ["twice"])

        # Revoke first (the worker keeps the id), then deliver: the body never runs.
        replies = app.control.revoke(str(gone), destination=[hostname], reply=True, timeout=5)
        assert replies, "worker did not acknowledge the revoke"

        before = db.execute("SELECT now() AS t").fetchone()["t"]
        with app.producer_or_acquire() as producer:
            for job_id, job_type, args in [(ok, "rl.record", ["ok"]), (bad, "rl.fail", ["bad"]),
                                           (flaky, "rl.flaky", ["flaky", 1]), (gone, "rl.record", ["gone"]),
                                           (twice, "rl.record", ["twice"])]:
                send_fire(app, producer, fire(job_id, job_type, args), sent_event=False)
            # The same fire delivered a second time (e.g. republished by a recovery sweep).
            send_fire(app, producer, fire(twice, "rl.record", ["twice"]), sent_event=False)

        final = {"success", "failure", "revoked"}
        wait_for(lambda: all(_row(db, j)["status"] in final for j in (ok, bad, flaky, gone, twice))
                 and _row(db, twice)["duplicates"] == 1,
                 timeout=20, message="ledger rows finished")

        r = _row(db, ok)
        assert r["status"] == "success" and r["worker"] == hostname
        assert before <= r["started_at"] <= r["finished_at"]
        assert r["retries"] == 0 and r["duplicates"] == 0
        assert _executions(db, ok) == 1

        r = _row(db, bad)
        assert r["status"] == "failure" and r["worker"] == hostname
        assert r["last_error"].startswith("ValueError: failing on purpose: bad")
        assert r["started_at"] <= r["finished_at"]

        r = _row(db, flaky)
        assert r["status"] == "success" and r["retries"] == 1, dict(r)
        assert "RuntimeError" in (r["last_error"] or "")
        assert r["started_at"] <= r["finished_at"]
        assert _executions(db, flaky) == 2

        r = _row(db, gone)
        assert r["status"] == "revoked" and r["finished_at"] is not None and r["started_at"] is None
        assert _executions(db, gone) == 0

        r = _row(db, twice)
        assert r["status"] == "success" and r["duplicates"] == 1
        assert _executions(db, twice) == 1
        wait_for(lambda: f"duplicate delivery of {twice} suppressed" in worker.log(), timeout=5,
                 message="duplicate logged")
    finally:
        worker.stop()


def test_mark_lost_runs(db):
    old = _insert_job(db, "rl.record", ["old"], status="started")
    limited = _insert_job(db, "rl.record", ["limited"], options={"time_limit": 60}, status="started")
    fresh = _insert_job(db, "rl.record", ["fresh"], status="started")
    done = _insert_job(db, "rl.record", ["done"], status="success")
    db.execute("UPDATE jobs SET started_at = now() - interval '2 hours' WHERE id IN (%s, %s)", (old, done))
    db.execute("UPDATE jobs SET started_at = now() - interval '2 minutes' WHERE id = %s", (limited,))
    db.execute("UPDATE jobs SET started_at = now() - interval '10 minutes' WHERE id = %s", (fresh,))

    assert len(BeatStore(db).mark_lost_runs(3600)) == 2
    assert _row(db, old)["status"] == "lost" and _row(db, old)["finished_at"] is not None
    assert _row(db, limited)["status"] == "lost"
    assert _row(db, fresh)["status"] == "started"
    assert _row(db, done)["status"] == "success"
    assert BeatStore(db).mark_lost_runs(3600) == []


def test_stats_on_hand_made_ledger(db):
    base = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = []
    for i, status in enumerate(["success"] * 4 + ["failure"]):
        rows.append(("alpha", base + timedelta(minutes=i), i + 1.0, i + 2.0, status))
    rows.append(("beta", base, 10.0, None, "sent"))
    for name, sf, send_lag, start_lag, status in rows:
        db.execute(
            "INSERT INTO jobs (id, schedule_name, scheduled_for, job_type, payload, stage, status, sent_at, started_at)"
            " VALUES (%s, %s, %s, 'rl.record', '{}', 'manual', %s, %s, %s)",
            (uuid.uuid4(), name, sf, status, sf + timedelta(seconds=send_lag),
             None if start_lag is None else sf + timedelta(seconds=start_lag)))

    result = {item["name"]: item for item in stats(db)}
    alpha, beta = result["alpha"], result["beta"]
    assert alpha["total"] == 5 and alpha["counts"] == {"success": 4, "failure": 1}
    assert alpha["send_lag_p50"] == pytest.approx(3.0)
    assert alpha["send_lag_p99"] == pytest.approx(4.96)
    assert alpha["send_lag_max"] == pytest.approx(5.0)
    assert alpha["start_lag_p50"] == pytest.approx(4.0)
    assert alpha["start_lag_max"] == pytest.approx(6.0)
    assert beta["counts"] == {"sent": 1} and beta["send_lag_max"] == pytest.approx(10.0)
    assert beta["start_lag_p50"] is None

    assert [i["name"] for i in stats(db, name="beta")] == ["beta"]
    assert stats(db, since_seconds=60) == []  # all scheduled in the past
    assert parse_duration("1h30m") == 5400


def _guarded_app(pg_dsn: str, schema: str, task_name: str, **conf):
    """An in-process app with the ledger hook and one task that appends its label to ``calls``:
    (app, task, calls)."""
    from celery import Celery

    from runledger_beat.worker import install

    calls: list = []
    app = Celery(f"rl-{task_name}", set_as_current=False)
    app.conf.update(runledger_dsn=pg_dsn, runledger_schema=schema, **conf)
    install(app)

    @app.task(name=task_name)
    def task(label):
        calls.append(label)
        return label

    app.finalize()
    return app, task, calls


def test_guard_in_process_missing_row_and_database_down(pg_dsn, schema, db):
    """Eager apply through the same tracer: a second run of a finished row is skipped;
    a run with no ledger row, or with the database unreachable, runs normally."""
    app, count, calls = _guarded_app(pg_dsn, schema, "guard.count")
    job_id = str(_insert_job(db, "guard.count", ["a"]))
    assert count.apply(("a",), task_id=job_id, headers={"runledger_id": job_id}).get() == "a"
    assert _row(db, job_id)["status"] == "success"
    count.apply(("a",), task_id=job_id, headers={"runledger_id": job_id})
    assert calls == ["a"] and _row(db, job_id)["duplicates"] == 1
    assert _row(db, job_id)["status"] == "success"

    unknown = str(uuid.uuid4())
    count.apply(("b",), task_id=unknown, headers={"runledger_id": unknown})
    assert calls == ["a", "b"]
    count("c")  # called directly: no ledger involvement
    assert calls == ["a", "b", "c"]

    app.conf.runledger_dsn = "postgresql://nobody@127.0.0.1:1/none?connect_timeout=1"
    app._runledger_ledger._drop()
    other = str(_insert_job(db, "guard.count", ["d"]))
    count.apply(("d",), task_id=other, headers={"runledger_id": other})
    assert calls[-1] == "d" and _row(db, other)["status"] == "sent"


def test_guard_with_a_signing_key_acts_only_on_messages_signed_for_the_rows_task(pg_dsn, schema, db, caplog):
    """Eager apply through the same tracer: unsigned, or signed for another task, the body runs and the ledger
    row is left alone (one warning); signed for the row's task, the run is recorded."""
    from runledger_beat.signing import sign

    key = "worker-test-signing-key-" + "w" * 12
    _, signed, calls = _guarded_app(pg_dsn, schema, "guard.signed", runledger_signing_key=key)
    job_id = str(_insert_job(db, "guard.signed", ["a"]))
    forged = [{"runledger_id": job_id},
              {"runledger_id": job_id, "runledger_sig": sign(key.encode(), job_id, "guard.other")},
              {"runledger_id": job_id, "runledger_sig": sign(b"another key of thirty-two chars!", job_id,
                                                              "guard.signed")}]
    with caplog.at_level("WARNING", logger="runledger_beat.worker"):
        for headers in forged:
            signed.apply(("forged",), task_id=job_id, headers=headers)
    assert calls == ["forged"] * 3
    row = _row(db, job_id)
    assert row["status"] == "sent" and row["started_at"] is None and row["duplicates"] == 0
    assert sum("carries no valid runledger_sig" in r.getMessage() for r in caplog.records) == 1
    good = sign(key.encode(), job_id, "guard.signed")
    assert signed.apply(("a",), task_id=job_id, headers={"runledger_id": job_id, "runledger_sig": good}).get() == "a"
    assert _row(db, job_id)["status"] == "success"
