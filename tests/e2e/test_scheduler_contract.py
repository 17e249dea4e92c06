"""runledger_beat.Scheduler honours celery beat's Scheduler contract."""

from __future__ import annotations

import time

import pytest
from celery import Celery

from runledger_beat import Scheduler
from runledger_beat.db import connect

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for


def _app(dsn: str, schema: str, broker: str = "memory://", **conf) -> Celery:
    app = Celery("contract", broker=broker)
    app.conf.update(runledger_dsn=dsn, runledger_schema=schema, beat_max_loop_interval=5, **conf)
    return app


def test_lazy_construction_touches_nothing_and_info_hides_the_password():
    app = _app("postgresql://alice:hunter2@127.0.0.1:1/none", "runledger")
    scheduler = Scheduler(app, lazy=True)  # nothing answers on port 1: any connect would raise
    assert scheduler.info == "runledger: postgresql://alice:***@127.0.0.1:1/none schema=runledger"
    assert "hunter2" not in scheduler.info
    scheduler.close()


def test_entry_point_alias_resolves_to_the_scheduler():
    from celery.utils.imports import load_extension_class_names, symbol_by_name
    aliases = dict(load_extension_class_names("celery.beat_schedulers"))
    assert symbol_by_name("runledger", aliases=aliases) is Scheduler


def test_run_once_returns_seconds_until_next_fire_capped(pg_dsn, schema, db):
    scheduler = Scheduler(_app(pg_dsn, schema, runledger_listen=False, runledger_poll_interval=30,
                               runledger_lookahead=0))
    try:
        assert scheduler.run_once() == pytest.approx(scheduler.max_interval, abs=0.01)  # nothing scheduled
        db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                   " VALUES (gen_random_uuid(), 'later', 'x', '* * * * *', now() + interval '2 seconds')")
        wait = scheduler.run_once()
        assert 1.5 < wait <= 2.01
        db.execute("UPDATE job_schedules SET next_fire_at = now() + interval '1 hour'")
        assert scheduler.run_once() == pytest.approx(scheduler.max_interval, abs=0.01)
    finally:
        scheduler.close()
    assert not scheduler.pipeline.connected and not scheduler.listener.listening


def test_lookahead_records_ahead_and_commits_at_the_instant(pg_dsn, schema, db):
    scheduler = Scheduler(_app(pg_dsn, schema, runledger_listen=False, runledger_poll_interval=5,
                               runledger_lookahead=2.0))
    try:
        db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                   " VALUES (gen_random_uuid(), 'soon', 'x', '0 0 1 1 *', now() + interval '3 seconds')")
        instant = db.execute("SELECT next_fire_at FROM job_schedules").fetchone()["next_fire_at"]
        wait = scheduler.run_once()
        wakes = time.time() + wait  # the host and the database share a clock here
        # It wakes when the fire enters the 2 s window (a hair after), however long the step itself took.
        assert instant.timestamp() - 2.0 <= wakes <= instant.timestamp() - 2.0 + 0.2, wakes - instant.timestamp()
        wait_for(lambda: scheduler.run_once() > 1.0 and scheduler.pipeline.prepared is not None, timeout=3,
                 message="the fire recorded ahead")
        # Recorded but not committed: invisible to others, the schedule row locked.
        assert count(db, "SELECT count(*) AS n FROM jobs") == 0
        with db.transaction():
            assert db.execute("SELECT id FROM job_schedules FOR UPDATE SKIP LOCKED").fetchall() == []
        sent = "SELECT scheduled_for, sent_at FROM jobs WHERE sent_at IS NOT NULL"
        row = wait_for(lambda: scheduler.run_once() is not None and db.execute(sent).fetchone(),
                       timeout=4, interval=0.001, message="the fire committed and sent at its instant")
        assert count(db, "SELECT count(*) AS n FROM jobs") == 1
        assert row["scheduled_for"] == instant
        assert row["sent_at"] >= instant  # never early, though recorded 2 s ahead
        assert (row["sent_at"] - instant).total_seconds() < 1.5  # at the instant, not at the next 5 s poll
    finally:
        scheduler.close()


def test_close_called_inside_a_tick_stops_the_tick_before_closing(pg_dsn, schema, db):
    """Celery's SIGTERM handler calls close() from inside whatever the main thread runs: the tick unwinds first."""
    class Interrupted(Scheduler):
        def run_once(self) -> float:
            wait = super().run_once()
            if self.pipeline.prepared is not None:
                self.close()  # what `celery beat`'s signal handler does, between two statements of a step
                assert self.pipeline.connected and self.pipeline.prepared is not None  # nothing closed under it
            return wait

    scheduler = Interrupted(_app(pg_dsn, schema, runledger_listen=False, runledger_lookahead=30))
    try:
        db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                   " VALUES (gen_random_uuid(), 'ahead', 'x', '0 0 1 1 *', now() + interval '20 seconds')")
        deadline = time.monotonic() + 10
        with pytest.raises(SystemExit):
            while time.monotonic() < deadline:
                scheduler.tick()
        assert scheduler.pipeline.connected  # the tick stopped; beat's service closes next
    finally:
        scheduler.close()
    assert not scheduler.pipeline.connected and scheduler.pipeline.prepared is None
    assert count(db, "SELECT count(*) AS n FROM jobs") == 0  # the prepared fire rolled back
    with db.transaction():
        assert len(db.execute("SELECT id FROM job_schedules FOR UPDATE SKIP LOCKED").fetchall()) == 1


def test_tick_wakes_at_once_on_notify(pg_dsn, schema, db):
    scheduler = Scheduler(_app(pg_dsn, schema))
    try:
        scheduler.run_once()
        other = connect(pg_dsn, schema, autocommit=True)
        started = time.monotonic()
        other.execute("UPDATE job_schedules SET updated_at = now()")  # any change notifies, even a no-op UPDATE
        scheduler.listener.wait(5.0)
        assert time.monotonic() - started < 2.0
        other.close()
    finally:
        scheduler.close()


@pytest.mark.serial  # bounds a time: from the INSERT to the fire's publish, under a second
def test_running_beat_picks_up_a_new_schedule_within_a_second(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beat = start_beat(env)
    try:
        wait_for(lambda: "beat: Starting" in beat.log(), timeout=20, message="beat to start")
        time.sleep(0.5)  # let beat settle into its 5 s wait, so only NOTIFY can wake it
        created = db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        insert_schedule(db, "new", cron="0 0 1 1 *", next_fire_at=created)
        row = wait_for(lambda: db.execute("SELECT sent_at FROM jobs WHERE sent_at IS NOT NULL").fetchone(),
                       timeout=10, message="the new schedule's fire")
        assert (row["sent_at"] - created).total_seconds() < 1.0
        assert count(db, "SELECT count(*) AS n FROM jobs") == 1
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
