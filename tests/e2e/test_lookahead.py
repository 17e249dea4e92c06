"""Fires recorded ahead in an open transaction: committed and published at the instant, never early, never lost."""

from __future__ import annotations

import json
import threading
import time
import uuid

import psycopg
import pytest
import redis
from celery import Celery
from kombu import Connection

from runledger_beat import Scheduler, api
from runledger_beat.db import connect, queries

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.rows import insert_schedule, ledger
from ..support.services import wait_for

ONCE = "0 0 1 1 *"  # after its first fire the cursor moves a year on


@pytest.fixture
def queue(amqp_url):
    name = f"rlla_{uuid.uuid4().hex[:8]}"
    yield name
    delete_queue(amqp_url, name)


def _scheduler(pg_dsn: str, schema: str, amqp_url: str, queue: str, **conf) -> Scheduler:
    app = Celery(f"la_{uuid.uuid4().hex[:6]}", broker=amqp_url)
    app.conf.update(dict(dict(runledger_dsn=pg_dsn, runledger_schema=schema, task_default_queue=queue,
                              runledger_listen=False, runledger_poll_interval=5, runledger_lookahead=2.0), **conf))
    return Scheduler(app)


def _run_until(schedulers: list[Scheduler], predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waits = [s.run_once() for s in schedulers]
        if predicate():
            return
        time.sleep(min(min(waits), 0.01))
    raise AssertionError("timed out running the scheduler")


def _soon(db, seconds: float):
    return db.execute("SELECT now() + make_interval(secs => %s) AS t", (seconds,)).fetchone()["t"]


def _in_queue(amqp_url: str, queue: str) -> int:
    with Connection(amqp_url) as conn:
        return conn.default_channel.queue_declare(queue, passive=True).message_count


def test_a_pause_during_the_lookahead_waits_for_that_fire_then_applies(db, pg_dsn, schema, amqp_url, queue):
    instant = _soon(db, 1.5)
    insert_schedule(db, "paused", cron=ONCE, next_fire_at=instant)
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue)
    done: dict = {}

    def pause() -> None:
        done["row"] = api.pause(pg_dsn, "paused", schema=schema)
        done["at"] = time.time()

    try:
        _run_until([scheduler], lambda: scheduler.pipeline.prepared is not None)
        pauser = threading.Thread(target=pause)
        pauser.start()
        time.sleep(0.3)
        assert "row" not in done  # the schedule row is locked by the fire being prepared
        _run_until([scheduler], lambda: not pauser.is_alive() and count(db, "SELECT count(*) AS n FROM jobs"
                                                                          " WHERE status = 'sent'") == 1)
        assert done["at"] >= instant.timestamp()  # it waited for the commit at the instant
        assert done["row"]["active"] is False
        for _ in range(3):
            scheduler.run_once()
    finally:
        scheduler.close()
    (row,) = ledger(db)
    assert row["scheduled_for"] == instant and row["sent_at"] >= instant


def test_a_due_row_arriving_meanwhile_goes_at_once_and_the_held_fire_at_its_instant(db, pg_dsn, schema, amqp_url,
                                                                                     queue):
    later = _soon(db, 1.5)
    insert_schedule(db, "later", cron=ONCE, next_fire_at=later)
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue)
    try:
        _run_until([scheduler], lambda: scheduler.pipeline.prepared is not None)
        now_id = insert_schedule(db, "now", cron=ONCE)
        _run_until([scheduler], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") >= 1)
        (first,) = db.execute("SELECT schedule_name, sent_at FROM jobs WHERE status = 'sent'").fetchall()
        assert first["schedule_name"] == "now" and first["sent_at"] < later
        assert ledger(db, now_id)[0]["status"] == "sent"
        _run_until([scheduler], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 2)
    finally:
        scheduler.close()
    held = db.execute("SELECT scheduled_for, sent_at FROM jobs WHERE schedule_name = 'later'").fetchone()
    assert held["scheduled_for"] == later and held["sent_at"] >= later
    wait_for(lambda: _in_queue(amqp_url, queue) == 2, message="both messages in the queue")


def test_overlap_skip_is_judged_at_the_instant_not_when_recorded(db, pg_dsn, schema, amqp_url, queue):
    instant = _soon(db, 1.5)
    finishing = insert_schedule(db, "finishing", cron=ONCE, overlap="skip", next_fire_at=instant)
    running = insert_schedule(db, "running", cron=ONCE, overlap="skip", next_fire_at=instant)
    previous = {}
    for sid in (finishing, running):
        previous[sid] = uuid.uuid4()
        db.execute("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload, status, started_at)"
                   " VALUES (%s, %s, now() - interval '1 minute', 'rl.record', '{}', 'started', now())",
                   (previous[sid], sid))
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue)
    try:
        _run_until([scheduler], lambda: scheduler.pipeline.prepared is not None)
        db.execute("UPDATE jobs SET status = 'success', finished_at = now() WHERE id = %s", (previous[finishing],))
        _run_until([scheduler], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for = %s",
                                              instant) == 2)
    finally:
        scheduler.close()
    fired = {r["schedule_name"]: r for r in db.execute("SELECT * FROM jobs WHERE scheduled_for = %s",
                                                       (instant,)).fetchall()}
    assert fired["finishing"]["status"] == "sent"
    assert fired["running"]["status"] == "skipped" and fired["running"]["last_error"].startswith("overlap:")


def test_the_first_instant_after_start_is_prepared_ahead_while_the_retention_drops_run(db, pg_dsn, schema, amqp_url,
                                                                                      queue):
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue, runledger_lookahead=3.0)
    instant = _soon(db, 3.0)  # set once the scheduler is up, inside the lookahead: preparing may start at once
    insert_schedule(db, "first", cron=ONCE, next_fire_at=instant)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            wait = scheduler.run_once()
            if scheduler.pipeline.prepared is not None:
                break
            time.sleep(wait)  # as celery beat sleeps between ticks
        prepared_at = time.time()
        assert scheduler.pipeline.prepared is not None
        # The first step's retention run holds preparing back for its ~20 ms, not until the instant.
        assert prepared_at < instant.timestamp() - 1.0
    finally:
        scheduler.close()


def test_a_second_beat_waits_for_the_instant_instead_of_spinning(db, pg_dsn, schema, amqp_url, queue):
    one = _scheduler(pg_dsn, schema, amqp_url, queue)
    two = _scheduler(pg_dsn, schema, amqp_url, queue)
    instant = _soon(db, 1.8)  # set once both schedulers are up: a slow start must not eat the margin
    insert_schedule(db, "shared", cron=ONCE, next_fire_at=instant)
    try:
        _run_until([one], lambda: one.pipeline.prepared is not None)
        two.run_once()  # its first step starts its retention drops: it looks again shortly until they end
        two.pipeline.housekeeping.wait_for_retention(10)
        wait = two.run_once()
        wakes = time.time() + wait
        assert two.pipeline.prepared is None
        # It sleeps until the instant the other beat holds (a hair after it), not a busy loop of 50 ms looks.
        assert wakes >= instant.timestamp() - 0.05, (wait, instant.timestamp() - wakes)
        _run_until([one, two], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 1)
        for _ in range(5):
            one.run_once(), two.run_once()
    finally:
        one.close()
        two.close()
    assert count(db, "SELECT count(*) AS n FROM jobs") == 1


def test_a_beat_killed_with_fires_recorded_ahead_loses_none(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    crasher = start_beat(dict(env, RL_EXTRA='{"runledger_lookahead": 5}'), "crasher")
    survivor = None
    try:
        # The instant is set once the beat runs (a slow start would otherwise fire it late, unlocked).
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM beats") == 1, timeout=30, message="the beat's row")
        instant = _soon(db, 6.0)
        sid = insert_schedule(db, "survives", cron=ONCE, next_fire_at=instant)
        def locked() -> bool:
            with db.transaction():
                return db.execute("SELECT id FROM job_schedules FOR UPDATE SKIP LOCKED").fetchall() == []
        wait_for(locked, timeout=20, message="the fire recorded ahead (schedule row locked)")
        crasher.kill()  # SIGKILL: its open transaction rolls back
        crasher.popen.wait(10)
        wait_for(lambda: not locked(), timeout=10, message="the lock to go with the dead beat")
        assert count(db, "SELECT count(*) AS n FROM jobs") == 0
        survivor = start_beat(env, "survivor")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 1, timeout=20,
                 message="the survivor to fire it")
    finally:
        crasher.stop()
        if survivor:
            survivor.stop()
        delete_queue(amqp_url, queue)
    (row,) = ledger(db, sid)
    assert row["scheduled_for"] == instant and row["sent_at"] >= instant


@pytest.mark.slow(seconds=12)
def test_a_big_instant_is_prepared_as_long_before_it_as_its_fires_take(db, pg_dsn, schema, amqp_url, queue):
    """runledger_lookahead 0.5 s would leave 2,000 fires to be recorded after their instant; the lookahead
    stretches to their count at the beat's rate (× 1.5, + 0.25 s), so all are prepared before it, and
    none goes early. The stretched transaction idles longer than the connection's idle timeout
    (lookahead + 5 s) would allow: it raises its own."""
    instant = _soon(db, 10.0)
    db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, cron_expr, next_fire_at)"
               " SELECT gen_random_uuid(), 'big-' || g, 'rl.record', '{\"args\": [], \"kwargs\": {}}', %s, %s"
               "   FROM generate_series(1, 2000) AS g", (ONCE, instant))
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue, runledger_lookahead=0.5, runledger_max_lookahead=20)
    pipeline = scheduler.pipeline
    pipeline.preparer.prepare_rate = 400.0  # as if measured: 2,000 fires take 5 s, so the lead is 7.75 s
    sizes: list[tuple[float, int]] = []
    leads: list[float] = []
    try:
        def committed() -> bool:
            leads.append(pipeline.preparer.lead)
            if pipeline.prepared is not None:
                sizes.append((time.time(), len(pipeline.prepared.outgoing)))
            return count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 2000

        _run_until([scheduler], committed, timeout=30)
        assert max(leads) == pytest.approx(1.5 * 2000 / 400.0 + 0.25)
        assert pipeline.preparer.prepare_rate != 400.0  # this instant's own preparation taught the rate
    finally:
        scheduler.close()
    began = min(at for at, _ in sizes)
    assert began < instant.timestamp() - 0.5  # ready before the plain lookahead would even have started
    assert max(n for at, n in sizes if at < instant.timestamp()) == 2000  # every fire ready before the instant
    first = db.execute("SELECT min(sent_at) AS t FROM jobs").fetchone()["t"]
    assert first >= instant
    wait_for(lambda: _in_queue(amqp_url, queue) == 2000, message="2,000 messages in the queue")


def test_a_small_instant_keeps_the_plain_lookahead(db, pg_dsn, schema, amqp_url, queue):
    insert_schedule(db, "small", cron=ONCE, next_fire_at=_soon(db, 1.0))
    scheduler = _scheduler(pg_dsn, schema, amqp_url, queue)
    try:
        _run_until([scheduler], lambda: scheduler.pipeline.prepared is not None)
        assert scheduler.pipeline.preparer.lead == 2.0
    finally:
        scheduler.close()


def _queued_ids(broker: str, queue: str) -> list[str]:
    """The task ids of the messages in ``queue`` (taking them off), checking each carries its ledger id."""
    ids = []
    if broker.startswith("redis"):
        client = redis.Redis.from_url(broker)
        for raw in client.lrange(queue, 0, -1):
            message = json.loads(raw)
            headers = message["headers"]
            assert headers["runledger_id"] == headers["id"] == message["properties"]["correlation_id"]
            ids.append(headers["id"])
        client.delete(queue)
        return ids
    with Connection(broker) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            headers = message.properties["application_headers"]
            assert headers["runledger_id"] == headers["id"] and message.properties["correlation_id"] == headers["id"]
            ids.append(headers["id"])
    return ids


@pytest.mark.parametrize("road", ["parked", "parked on redis", "by id"])
def test_an_instant_bigger_than_beat_holds_is_published_once_in_chunks(db, pg_dsn, schema, amqp_url, queue,
                                                                        request, road):
    """Past MAX_PREPARED fires an instant's fires are still recorded ahead, but not kept in memory: on a
    fast path (RabbitMQ or Redis) they are parked on disk encoded; on Celery's path (a publish receiver
    connected) kept by id and read back after the commit. Either way every fire is published exactly once,
    none early, and an overlap skip still applies to a fire out of memory."""
    from celery import signals

    broker = request.getfixturevalue("redis_url") if road == "parked on redis" else amqp_url

    traced: list[str] = []

    def receiver(sender=None, headers=None, **kwargs):
        traced.append(headers["id"])

    if road == "by id":
        signals.before_task_publish.connect(receiver)
    instant = _soon(db, 4.0)
    db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, cron_expr, next_fire_at)"
               " SELECT gen_random_uuid(), 'wide-' || g, 'rl.record', jsonb_build_object('args', jsonb_build_array(g),"
               " 'kwargs', '{}'::jsonb), %s, %s FROM generate_series(1, 380) AS g", (ONCE, instant))
    busy = []
    for i in range(20):
        sid = insert_schedule(db, f"busy-{i}", cron=ONCE, overlap="skip", next_fire_at=instant)
        db.execute("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload, status, started_at)"
                   " VALUES (gen_random_uuid(), %s, now() - interval '1 minute', 'rl.record', '{}', 'started', now())",
                   (sid,))
        busy.append(sid)
    scheduler = _shrunk(_scheduler(pg_dsn, schema, broker, queue, runledger_lookahead=3.0))
    pipeline = scheduler.pipeline
    seen: dict = {}
    try:
        def recorded() -> bool:
            prepared = pipeline.prepared
            if prepared is not None:
                seen.update(size=prepared.size, held=len(prepared.outgoing), by_id=len(prepared.by_id),
                            parked=len(prepared.parked) if prepared.parked else 0,
                            overlap_out=len(prepared.overlap), at=time.time())
            return prepared is not None and prepared.size == 400

        _run_until([scheduler], recorded, timeout=15)
        assert seen["at"] < instant.timestamp()  # all 400 recorded before the instant
        assert seen["held"] == 100 and seen["overlap_out"] == 20  # 300 out of memory; the 20 'skip' ones picked out
        assert (seen["parked"], seen["by_id"]) == ((0, 300) if road == "by id" else (300, 0))
        expected_road = {"parked": "amqp", "parked on redis": "redis"}.get(road, "celery-amqp")
        assert scheduler.pipeline.dispatcher.publisher() == expected_road
        _run_until([scheduler], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for = %s"
                                                  " AND status IN ('sent', 'skipped')", instant) == 400, timeout=15)
    finally:
        scheduler.close()
        signals.before_task_publish.disconnect(receiver)
    rows = db.execute("SELECT id, schedule_id, status, sent_at FROM jobs WHERE scheduled_for = %s",
                      (instant,)).fetchall()
    assert len(rows) == 400
    assert {r["status"] for r in rows if r["schedule_id"] in busy} == {"skipped"}
    sent = [r for r in rows if r["schedule_id"] not in busy]
    assert {r["status"] for r in sent} == {"sent"} and min(r["sent_at"] for r in sent) >= instant
    if road == "parked on redis":
        assert redis.Redis.from_url(broker).llen(queue) == 380  # Redis answers each push: all in by now
    else:
        wait_for(lambda: _in_queue(amqp_url, queue) == 380, message="380 messages in the queue")
    ids = _queued_ids(broker, queue)
    assert sorted(ids) == sorted(str(r["id"]) for r in sent)  # each sent fire once, nothing else
    assert sorted(traced) == (sorted(ids) if road == "by id" else [])  # Celery's path: each publish signalled


def _shrunk(scheduler: Scheduler) -> Scheduler:
    """The scheduler with its limits shrunk: 100 fires kept in memory, the rest parked or kept by id and published
    70 at a time (several chunks, the last one short)."""
    scheduler.pipeline.preparer.max_prepared = 100
    scheduler.pipeline.outbox.chunk = 70
    return scheduler


def _big_instant(db, n: int = 300):
    """``n`` one-off schedules due in 4 s (with a shrunk publisher: committed 'pending', parked, and published in
    several chunks); returns the instant."""
    instant = _soon(db, 4.0)
    db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, cron_expr, next_fire_at)"
               " SELECT gen_random_uuid(), 'big-' || g, 'rl.record',"
               " jsonb_build_object('args', jsonb_build_array(g), 'kwargs', '{}'::jsonb), %s, %s"
               " FROM generate_series(1, %s) AS g",
               (ONCE, instant, n))
    return instant


def _sweep_past_the_grace(db, sweeper: Scheduler, instant, swept: list[int]) -> None:
    """Wait until the instant is past runledger_recovery_grace (1 s), then run ``sweeper``'s recovery sweep;
    records in ``swept`` how many of the ledger's rows were pending when it ran."""
    wait_for(lambda: db.execute("SELECT now() > %s + interval '1.5 seconds' AS past",
                                (instant,)).fetchone()["past"], message="the instant past the grace")
    pending = count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'")
    sweeper.pipeline.connect()
    sweeper.pipeline.housekeeping.sweep()
    swept.append(pending)


def _assert_each_fire_queued_once(db, amqp_url: str, queue: str, instant, n: int = 300) -> None:
    wait_for(lambda: _in_queue(amqp_url, queue) >= n, message=f"{n} messages in the queue")
    ids = _queued_ids(amqp_url, queue)
    rows = db.execute("SELECT id FROM jobs WHERE scheduled_for = %s", (instant,)).fetchall()
    assert sorted(ids) == sorted(str(r["id"]) for r in rows)  # each fire published once


def test_another_beats_sweep_leaves_a_big_instant_being_published_alone(db, pg_dsn, schema, amqp_url, queue):
    """An instant bigger than beat holds is committed 'pending' and marked sent after its last chunk; a slow
    broker can keep it pending past runledger_recovery_grace. Another beat's recovery sweep in that window must
    not take its rows for abandoned and publish them a second time (seen: 3,705 duplicates of a 100k burst
    with three beats on a slow hour)."""
    instant = _big_instant(db)
    publisher = _shrunk(_scheduler(pg_dsn, schema, amqp_url, queue, runledger_recovery_grace=1))
    sweeper = _scheduler(pg_dsn, schema, amqp_url, queue, runledger_recovery_grace=1)
    swept: list[int] = []

    def slow_broker() -> None:
        """At the instant's first confirms: wait past the grace, then let the other beat sweep."""
        if not swept:
            _sweep_past_the_grace(db, sweeper, instant, swept)

    publisher.pipeline.after_publish = slow_broker
    try:
        _run_until([publisher], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 300,
                   timeout=20)
    finally:
        publisher.close()
        sweeper.close()
    assert swept and swept[0] == 300  # the sweep ran while all of the instant was pending, past the grace
    _assert_each_fire_queued_once(db, amqp_url, queue, instant)


def test_a_sweep_in_progress_at_the_commit_only_delays_the_publishing_lock(db, pg_dsn, schema, amqp_url, queue,
                                                                            monkeypatch):
    """A sweep in progress at a big instant's commit keeps the publishing lock for its transaction, so the
    publisher cannot take it then; it takes it before its next chunk, and a sweep past the grace after that still
    leaves the instant alone."""
    instant = _big_instant(db)
    publisher = _shrunk(_scheduler(pg_dsn, schema, amqp_url, queue, runledger_recovery_grace=1))
    sweeper = _scheduler(pg_dsn, schema, amqp_url, queue, runledger_recovery_grace=1)
    in_progress = connect(pg_dsn, schema)  # an open transaction holding what a sweep's sweep_lock takes
    assert in_progress.execute(queries.sweep_lock).fetchone()["free"]
    chunks: list[bool] = []  # per chunk released: whether the publisher held the lock by then
    swept: list[int] = []
    release = publisher.pipeline.outbox.release

    def chunk_released(*args, **kwargs) -> None:
        if in_progress.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            in_progress.commit()  # the sweep in progress ends after the commit's try
        chunks.append(publisher.pipeline.outbox.holds_publishing_lock)
        release(*args, **kwargs)

    def slow_broker() -> None:
        """After a later chunk than the first: wait past the grace, then let the other beat sweep."""
        if not swept and len(chunks) >= 2:
            _sweep_past_the_grace(db, sweeper, instant, swept)

    monkeypatch.setattr(publisher.pipeline.outbox, "release", chunk_released)
    publisher.pipeline.after_publish = slow_broker
    try:
        _run_until([publisher], lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == 300,
                   timeout=20)
    finally:
        publisher.close()
        sweeper.close()
        in_progress.close()
    assert swept and swept[0] == 300  # the sweep ran while all of the instant was pending, past the grace
    _assert_each_fire_queued_once(db, amqp_url, queue, instant)
    assert chunks[0] is False and chunks[1] is True  # kept from the lock at the commit, held from the next chunk
