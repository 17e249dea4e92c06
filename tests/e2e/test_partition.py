"""A beat frozen (SIGSTOP) or cut off from Postgres while it holds a prepared instant: another beat fires.

The frozen beat's open transaction holds the schedule rows' locks; the server
ends it once it has been idle past the lookahead plus a margin
(idle_in_transaction_session_timeout), and the other beat then claims and fires
the rows. Nothing is published twice: the frozen beat's fires were never
committed, and the unique slot index stands behind the locks.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import pytest

from ..support.e2e import count, delete_queue, prepare
from ..support.netcut import Proxy
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for

pytestmark = pytest.mark.slow

ONCE = "0 0 1 1 *"
SCHEDULES = 20
LOOKAHEAD = 5


def _locked(db) -> bool:
    with db.transaction():
        return db.execute("SELECT id FROM job_schedules FOR UPDATE SKIP LOCKED").fetchall() == []


def _hold(db) -> tuple:
    """Once the beats started tick, SCHEDULES schedules due at one instant LOOKAHEAD + 4 s on: a beat slow to start
    on a loaded machine still prepares the instant ahead. Returns (instant, their ids)."""
    wait_for(lambda: count(db, "SELECT count(*) AS n FROM beats") > 0, timeout=60, message="the beat to start")
    instant = db.execute("SELECT date_trunc('second', now()) + make_interval(secs => %s) AS t",
                         (LOOKAHEAD + 4,)).fetchone()["t"]
    ids = [insert_schedule(db, f"held{i:02d}", cron=ONCE, next_fire_at=instant) for i in range(SCHEDULES)]
    return instant, ids


def _assert_fired_once(db, instant, ids) -> None:
    assert count(db, "SELECT count(*) AS n FROM jobs") == SCHEDULES
    rows = db.execute("SELECT schedule_id, scheduled_for, status, sent_at FROM jobs").fetchall()
    assert {r["schedule_id"] for r in rows} == set(ids)
    assert all(r["scheduled_for"] == instant and r["status"] == "sent" for r in rows)
    assert max(r["sent_at"] for r in rows) - instant < timedelta(seconds=15)


def test_a_frozen_beat_holding_an_instant_is_replaced_within_15_seconds(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    frozen = start_beat(dict(env, RL_EXTRA=f'{{"runledger_lookahead": {LOOKAHEAD}}}'), "frozen")
    other = None
    try:
        instant, ids = _hold(db)
        wait_for(lambda: _locked(db), timeout=30, message="the first beat to prepare the instant")
        os.killpg(frozen.popen.pid, signal.SIGSTOP)
        other = start_beat(env, "other")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == SCHEDULES,
                 timeout=40, message="the other beat to fire every held schedule")
        _assert_fired_once(db, instant, ids)
        os.killpg(frozen.popen.pid, signal.SIGCONT)
        wait_for(lambda: "rolled back" in frozen.log() or "unavailable" in frozen.log(), timeout=20,
                 message="the thawed beat to notice its transaction is gone")
        assert frozen.alive()
        _assert_fired_once(db, instant, ids)  # still exactly once
    finally:
        frozen.kill(signal.SIGCONT)
        frozen.stop()
        if other:
            other.stop()
        delete_queue(amqp_url, queue)


def test_a_beat_cut_off_from_postgres_is_replaced_within_15_seconds(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    parts = urlsplit(pg_dsn)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    behind = urlunsplit(parts._replace(netloc=f"{parts.username}@127.0.0.1:{proxy.port}"))
    cut_off = start_beat(dict(env, RUNLEDGER_DSN=behind, RL_EXTRA=f'{{"runledger_lookahead": {LOOKAHEAD}}}'), "cut")
    other = None
    try:
        instant, ids = _hold(db)
        wait_for(lambda: _locked(db), timeout=30, message="the beat behind the proxy to prepare the instant")
        proxy.cut()
        other = start_beat(env, "other")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == SCHEDULES,
                 timeout=40, message="the other beat to fire every held schedule")
        _assert_fired_once(db, instant, ids)
        proxy.heal()
        wait_for(lambda: "unavailable" in cut_off.log() or "rolled back" in cut_off.log(), timeout=30,
                 message="the cut-off beat to notice")
        assert cut_off.alive()
        _assert_fired_once(db, instant, ids)
    finally:
        cut_off.stop()
        if other:
            other.stop()
        proxy.close()
        delete_queue(amqp_url, queue)


def test_sigterm_rolls_back_a_prepared_instant_at_once(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beat = start_beat(dict(env, RL_EXTRA='{"runledger_lookahead": 30}'), "terminated")
    other = None
    try:
        instant, ids = _hold(db)
        wait_for(lambda: _locked(db), timeout=30, message="the beat to prepare the instant")
        beat.popen.send_signal(signal.SIGTERM)  # celery beat's own process: a clean shutdown
        started = time.monotonic()
        beat.popen.wait(25)
        assert time.monotonic() - started < 20
        assert not _locked(db) and count(db, "SELECT count(*) AS n FROM jobs") == 0
        assert beat.popen.returncode == 0, beat.log()[-2000:]  # a clean exit, not a crash
        other = start_beat(env, "other")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == SCHEDULES,
                 timeout=30, message="another beat to fire them at their instant")
        _assert_fired_once(db, instant, ids)
    finally:
        beat.stop()
        if other:
            other.stop()
        delete_queue(amqp_url, queue)


def test_a_dropped_listen_connection_is_reopened(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beat = start_beat(env, "listener")
    try:
        listening = "SELECT pid FROM pg_stat_activity WHERE application_name = 'runledger_beat.listen'" \
                    " AND query LIKE 'LISTEN%%' AND datname = current_database()"
        wait_for(lambda: db.execute(listening).fetchall(), timeout=20, message="beat to LISTEN")
        before = {r["pid"] for r in db.execute(listening).fetchall()}
        for pid in before:
            db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_for(lambda: {r["pid"] for r in db.execute(listening).fetchall()} - before, timeout=30,
                 message="a new LISTEN connection")
        time.sleep(0.5)  # let beat settle into its 5 s wait, so only NOTIFY can wake it soon
        created = db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        insert_schedule(db, "after-reconnect", cron=ONCE, next_fire_at=created)
        row = wait_for(lambda: db.execute("SELECT sent_at FROM jobs WHERE sent_at IS NOT NULL").fetchone(),
                       timeout=10, message="the new schedule's fire")
        assert (row["sent_at"] - created).total_seconds() < 2.5  # NOTIFY woke it: its poll is 5 s away
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
