"""Bad data is refused at the door or contained: one schedule or fire fails alone, backs off, is quarantined."""

from __future__ import annotations

import json
import math
import uuid
from datetime import timedelta

import pytest
from celery import Celery

from runledger_beat import api
from runledger_beat.beat.claim import FaultPolicy, run_pass
from runledger_beat.beat.pipeline import FirePipeline
from runledger_beat.db import connect
from runledger_beat.db.beat_store import BeatStore
from runledger_beat.db.worker_store import WorkerStore
from runledger_beat.errors import ScheduleError
from runledger_beat.settings import load

from ..support.e2e import delete_queue
from ..support.rows import insert_schedule, ledger
from ..support.services import wait_for


def _upkeep_round(pipeline: FirePipeline) -> None:
    """Run a step, then wait until an upkeep round has run from start to end since (upkeep.py)."""
    pipeline.run_once()
    upkeep = pipeline.housekeeping.upkeep
    ticket = upkeep.soon()
    wait_for(lambda: upkeep.served >= ticket, message="an upkeep round")


@pytest.fixture
def tx(pg_dsn, schema):
    conn = connect(pg_dsn, schema)
    yield BeatStore(conn)
    conn.close()


DEEP: list = [1]
for _ in range(100):
    DEEP = [DEEP]


@pytest.mark.parametrize(("fields", "field"), [
    ({"every": float("inf")}, "every"),
    ({"every": float("nan")}, "every"),
    ({"every": 1, "args": [float("nan")]}, "args[0]"),  # the error names the place in the value
    ({"every": 1, "kwargs": {"a": object()}}, "kwargs.a"),
    ({"every": 1, "options": {"expires": 3e11}}, "expires"),
    ({"every": 1, "options": {"headers": {"task": "other.task"}}}, "headers"),
    ({"every": 1, "options": {"serializer": "pickle"}}, "options"),
    ({"every": 1, "args": [DEEP]}, "args"),
    ({"every": 1, "end": "10000-01-01T00:00:00"}, "end"),
    ({"cron": "* * * * *", "timezone": "x" * 100}, "timezone"),
], ids=["inf-every", "nan-every", "nan-arg", "object-kwarg", "huge-expires", "protocol-header", "serializer",
        "deep-args", "far-end", "long-zone"])
def test_the_api_refuses_bad_input_with_a_schedule_error(db, fields, field):
    with pytest.raises(ScheduleError) as err:
        api.create(db, "bad", "rl.record", **fields)
    assert err.value.field == field
    assert db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"] == 0


def test_names_with_control_characters_are_refused(db):
    with pytest.raises(ScheduleError) as err:
        api.create(db, "bad\nname", "rl.record", every=5)
    assert err.value.field == "name" and "control" in err.value.reason


def test_a_failing_schedule_backs_off_then_is_quarantined_and_resume_clears_it(db, tx):
    bad = insert_schedule(db, "bad", cron="not a cron", next_fire_at="2026-01-01T00:00:00Z")
    good = insert_schedule(db, "good", cron="0 0 1 1 *")  # fires once, however slow the passes
    policy = FaultPolicy(delay=1, max_delay=8, quarantine_after=3)
    delays = []
    for _ in range(3):
        run_pass(tx, 100, policy)
        fault = db.execute("SELECT failures, retry_at - failed_at AS d, quarantined_at FROM schedule_faults"
                           " WHERE schedule_id = %s", (bad,)).fetchone()
        delays.append(fault["d"])
        db.execute("UPDATE schedule_faults SET retry_at = now() - interval '1 second'")  # its retry is due
    assert delays[:2] == [timedelta(seconds=1), timedelta(seconds=2)]  # doubling back-off
    assert fault["failures"] == 3 and fault["quarantined_at"] is not None
    assert run_pass(tx, 100, policy).claimed == 0  # quarantined: never claimed, even when due
    assert ledger(db, bad) == [] and len(ledger(db, good)) == 1
    shown = api.get(db, "bad")
    assert shown["quarantined_at"] is not None and shown["last_error"].startswith("cron:")
    with pytest.raises(ScheduleError):
        api.resume(db, "bad")  # still a bad cron: resume refuses and keeps the quarantine
    api.update(db, "bad", cron="* * * * * *")
    resumed = api.resume(db, "bad")
    assert resumed["quarantined_at"] is None and resumed["failures"] == 0 and resumed["active"]


def test_rows_no_valid_schedule_holds_are_contained(db, tx):
    """Rows written before migration 0002's constraints: infinite dates, JSON too deep to load, NaN args."""
    for constraint in ("end_at_in_range", "payload_template_valid", "next_fire_at_in_range"):
        db.execute(f"ALTER TABLE job_schedules DROP CONSTRAINT job_schedules_{constraint}")
    ends = insert_schedule(db, "infinite-end")
    db.execute("UPDATE job_schedules SET end_at = 'infinity' WHERE id = %s", (ends,))
    deep = insert_schedule(db, "deep-json")
    db.execute("UPDATE job_schedules SET payload_template = %s::jsonb WHERE id = %s",
               ("[" * 5000 + "]" * 5000, deep))
    nan = insert_schedule(db, "nan-arg")
    db.execute("""UPDATE job_schedules SET payload_template = '{"args": ["NaN"], "kwargs": {}}' WHERE id = %s""",
               (nan,))
    early = insert_schedule(db, "minus-infinity")
    db.execute("UPDATE job_schedules SET next_fire_at = '-infinity' WHERE id = %s", (early,))
    good = insert_schedule(db, "good", cron="0 0 1 1 *")  # fires once, however slow the passes
    result = run_pass(tx, 100)
    assert result.deferred == 3  # infinite end, deep JSON, -infinity cursor
    assert {r["schedule_id"] for r in ledger(db)} == {nan, good}  # a string "NaN" is just a string
    errors = {r["schedule_id"]: r["last_error"] for r in db.execute("SELECT * FROM schedule_faults").fetchall()}
    assert errors[ends].startswith("end_at:") and errors[early].startswith("next_fire_at:")
    assert "payload_template" in errors[deep]
    listed = {s["name"]: s for s in api.list_schedules(db)}  # list works on the same rows
    assert listed["infinite-end"]["failures"] == 1 and listed["good"]["failures"] == 0


def test_unsafe_settings_are_refused_with_one_line():
    for key, value in (("runledger_recovery_grace", 0), ("runledger_defer_seconds", 0),
                       ("runledger_lookahead", math.inf), ("runledger_max_lookahead", 61),
                       ("runledger_max_lookahead", -1), ("runledger_batch_size", "many")):
        app = Celery("settings")
        app.conf.update(runledger_dsn="postgresql://x@127.0.0.1/db", **{key: value})
        with pytest.raises(Exception) as err:
            load(app.conf)
        assert str(err.value).startswith(f"{key}:")


def _pipeline(pg_dsn, schema, amqp_url, queue, **conf) -> FirePipeline:
    app = Celery(f"c_{uuid.uuid4().hex[:6]}", broker=amqp_url)
    app.conf.update(runledger_dsn=pg_dsn, runledger_schema=schema, task_default_queue=queue,
                    runledger_listen=False, runledger_lookahead=0, **conf)
    return FirePipeline(app, load(app.conf))


def test_a_fire_the_broker_keeps_refusing_is_dead_lettered_and_never_starves_others(db, pg_dsn, schema, amqp_url):
    queue = f"rlc_{uuid.uuid4().hex[:8]}"
    pipeline = _pipeline(pg_dsn, schema, amqp_url, queue, runledger_max_publish_attempts=2,
                         runledger_recovery_grace=1)
    try:
        missing = {"exchange": f"rl-missing-{uuid.uuid4().hex[:6]}", "routing_key": "x"}
        poison = insert_schedule(db, "poison", cron="0 0 1 1 *", options=missing)
        pipeline.run_once()
        (row,) = ledger(db, poison)
        assert row["status"] == "pending" and row["dispatch_attempts"] == 1
        assert "NotFound" in row["last_error"]
        # the grace and the back-off have passed
        db.execute("UPDATE jobs SET last_attempt_at = now() - interval '1 hour',"
                   " created_at = now() - interval '1 hour', scheduled_for = scheduled_for - interval '1 hour'")
        good = insert_schedule(db, "good", cron="0 0 1 1 *")
        pipeline.sweep_soon()
        pipeline.run_once()
        (row,) = ledger(db, poison)
        assert row["status"] == "failed" and row["dispatch_attempts"] == 2 and row["finished_at"] is not None
        assert ledger(db, good)[0]["status"] == "sent"
        pipeline.sweep_soon()
        pipeline.run_once()
        assert ledger(db, poison)[0]["dispatch_attempts"] == 2  # dead-lettered rows take no more of the sweep
    finally:
        pipeline.close()
        delete_queue(amqp_url, queue)


def test_sent_fires_past_their_expiry_resolve_so_overlap_skip_goes_on(db, pg_dsn, schema, amqp_url):
    queue = f"rlc_{uuid.uuid4().hex[:8]}"
    pipeline = _pipeline(pg_dsn, schema, amqp_url, queue)
    try:
        sid = insert_schedule(db, "expiring", overlap="skip", options={"expires": 1})
        # No worker consumes the queue: the first fire stays 'sent', so the next is skipped.
        pipeline.run_once()
        db.execute("UPDATE job_schedules SET next_fire_at = now() WHERE id = %s", (sid,))
        pipeline.run_once()
        assert [r["status"] for r in ledger(db, sid)] == ["sent", "skipped"]
        db.execute("UPDATE jobs SET scheduled_for = scheduled_for - interval '5 seconds' WHERE status = 'sent'")
        _upkeep_round(pipeline)  # the upkeep's sweep: the message expired unconsumed
        db.execute("UPDATE job_schedules SET next_fire_at = now() WHERE id = %s", (sid,))
        pipeline.run_once()
        statuses = [r["status"] for r in ledger(db, sid)]
        # the expired fire, the skips while it was live (one, more on a slow machine), then a fire sent again
        assert statuses[0] == "expired" and statuses[-1] == "sent"
        assert set(statuses[1:-1]) == {"skipped"}
    finally:
        pipeline.close()
        delete_queue(amqp_url, queue)


def test_sent_fires_never_started_become_lost_only_where_a_worker_runs_the_hook(db, pg_dsn, schema, amqp_url):
    queue = f"rlc_{uuid.uuid4().hex[:8]}"
    pipeline = _pipeline(pg_dsn, schema, amqp_url, queue, runledger_lost_after=60)
    try:
        sid = insert_schedule(db, "unstarted", cron="0 0 1 1 *")
        pipeline.run_once()
        db.execute("UPDATE jobs SET sent_at = now() - interval '2 minutes'")
        _upkeep_round(pipeline)
        assert ledger(db, sid)[0]["status"] == "sent"  # no worker reported the hook: nothing to conclude
        WorkerStore(db).worker_seen("w1/1", 1)
        _upkeep_round(pipeline)
        assert ledger(db, sid)[0]["status"] == "lost"
    finally:
        pipeline.close()
        delete_queue(amqp_url, queue)


def test_a_forged_ledger_header_marks_nothing(db, pg_dsn, schema, amqp_url):
    """The worker hook acts only when runledger_id equals the task id."""
    from ..support.e2e import prepare
    from ..support.procs import start_worker
    from ..support.services import wait_for
    env, queue = prepare(db, pg_dsn, schema, amqp_url, hook=True)
    target = uuid.uuid4()
    db.execute("INSERT INTO jobs (id, job_type, payload, status) VALUES (%s, 'rl.record', %s, 'sent')",
               (target, json.dumps({"args": ["genuine"], "kwargs": {}})))
    worker = start_worker(env, concurrency=1)
    app = Celery("forger", broker=amqp_url)
    try:
        forged = app.send_task("rl.record", args=["forged"], queue=queue, headers={"runledger_id": str(target)})
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM executions WHERE task_id = %s",
                                    (forged.id,)).fetchone()["n"] == 1, timeout=30, message="the forged task to run")
        app.send_task("rl.record", args=["genuine"], queue=queue, task_id=str(target),
                      headers={"runledger_id": str(target)})
        wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s", (target,)).fetchone()["status"]
                 == "success", timeout=30, message="the genuine delivery to run and mark its row")
        row = db.execute("SELECT duplicates FROM jobs WHERE id = %s", (target,)).fetchone()
        assert row["duplicates"] == 0
        assert db.execute("SELECT count(*) AS n FROM executions WHERE task_id = %s",
                          (str(target),)).fetchone()["n"] == 1
    finally:
        worker.stop()
        delete_queue(amqp_url, queue)
