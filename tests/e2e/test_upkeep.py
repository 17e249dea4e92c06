"""Housekeeping never delays an instant: the upkeep waits on its own connection and thread, beat's loop goes on."""

from __future__ import annotations

import uuid

import pytest

from runledger_beat.db import connect
from runledger_beat.db.worker_store import WorkerStore

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for

#: Fires observed while the lock is held (one a second).
FIRES = 8
#: The every-second fires' lag bound while the upkeep waits (they leave in a few ms when all is well; a loop that
#: waited on the lock would be held up to the lock timeout, 5 s).
LAG_BOUND = 0.5


@pytest.mark.serial
def test_a_lock_on_what_the_upkeep_touches_never_delays_an_every_second_fire(db, pg_dsn, schema, amqp_url):
    # The sweep (every second with this grace) marks a sent fire never started lost, a worker with the hook
    # having reported: this one, once the lock held on it below is gone.
    env, queue = prepare(db, pg_dsn, schema, amqp_url,
                         extra={"runledger_recovery_grace": 2, "runledger_lost_after": 60})
    stale = uuid.uuid4()
    db.execute("INSERT INTO jobs (id, schedule_name, scheduled_for, job_type, payload, stage, status, sent_at)"
               " VALUES (%s, 'stale', now() - interval '1 hour', 'rl.record', '{}', 'manual', 'sent',"
               "         now() - interval '1 hour')", (stale,))
    WorkerStore(db).worker_seen("w1/1", 1)
    sid = insert_schedule(db, "every-second", cron="* * * * * *")
    holder = connect(pg_dsn, schema)  # an operator's open transaction holding the row
    holder.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (stale,))
    beat = start_beat(env)
    try:
        # Judged from the second fire sent: the first ones leave while beat itself is starting (importing,
        # connecting), on a machine whose cores other tests share.
        first = wait_for(lambda: db.execute("SELECT (array_agg(scheduled_for ORDER BY scheduled_for))[2] AS t"
                                            " FROM jobs WHERE schedule_id = %s AND status = 'sent'",
                                            (sid,)).fetchone()["t"],
                         timeout=30, message="the second fire")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_id = %s AND status = 'sent'"
                                   " AND scheduled_for > %s", sid, first) >= FIRES,
                 timeout=30, message=f"{FIRES} every-second fires")
        lags = [r["lag"] for r in db.execute(
            "SELECT extract(epoch FROM sent_at - scheduled_for)::float8 AS lag FROM jobs"
            " WHERE schedule_id = %s AND status = 'sent' AND scheduled_for > %s", (sid, first)).fetchall()]
        still = db.execute("SELECT status FROM jobs WHERE id = %s", (stale,)).fetchone()["status"]
        assert still == "sent"  # the upkeep could not touch it: the lock was in its way all along
        assert len(lags) >= FIRES and max(lags) < LAG_BOUND, lags
        holder.rollback()
        wait_for(lambda: db.execute("SELECT status FROM jobs WHERE id = %s", (stale,)).fetchone()["status"] == "lost",
                 timeout=30, message="the upkeep marking the fire lost once the lock is gone")
        assert beat.alive()
    finally:
        holder.close()
        beat.stop()
        delete_queue(amqp_url, queue)
