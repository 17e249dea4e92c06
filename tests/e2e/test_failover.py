"""A failover under every-second fires: two real beats on a multi-host DSN (``target_session_attrs=read-write``) over a
primary and its synchronous standby. The standby is promoted and the old primary stopped (sessions ended by an
administrator's shutdown, then nothing listening), or left up refusing writes (a demoted node: SQLSTATE 25006 on the
next write, passed over by read-write connections): the beats drop their connections, reconnect with back-off to the
new primary and fire again within 20 s; every slot after that goes out once, and every message in the queue has its
ledger row on the new primary (nothing was published without its commit, nothing committed went out twice)."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import timedelta

import pytest
from kombu import Connection

from runledger_beat.db import connect, migrate

from ..support.e2e import delete_queue
from ..support.procs import celery_env, start_beat
from ..support.replication import StandbyPair
from ..support.services import wait_for

# serial: it bounds a time (fires again within RESUME_WITHIN), and under the parallel phase's load one of the two
# beats of the "stopped" case twice logged nothing after the promotion (it neither lost nor found Postgres).
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.disk]

SCHEDULES = 4
BEFORE = 2  # seconds of fires before the promotion
AFTER = 5   # seconds of fires judged once they resumed
RESUME_WITHIN = 20.0


def _queued_ids(broker: str, queue: str) -> list[str]:
    """The task ids of every message in the queue (consumed)."""
    ids = []
    with Connection(broker, connect_timeout=5) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            ids.append(message.headers["id"])
    return ids


@pytest.mark.parametrize("old_primary", ["stopped", "read-only"])
def test_beats_follow_a_promoted_synchronous_standby(amqp_url, old_primary):
    pair = StandbyPair()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    beats = []
    try:
        ha = pair.ha_dsn()
        with connect(ha, "public") as conn:
            migrate(conn, schema)
        with connect(ha, schema, autocommit=True) as db:
            start = db.execute("SELECT date_trunc('second', now()) + interval '4 seconds' AS t").fetchone()["t"]
            for i in range(SCHEDULES):
                db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr,"
                           " next_fire_at) VALUES (%s, %s, 'rl.record', %s, 'cron', '* * * * * *', %s)",
                           (uuid.uuid4(), f"each-{i}", f'{{"args": ["each-{i}"], "kwargs": {{}}}}', start))
        with Connection(amqp_url, connect_timeout=5) as conn:
            conn.default_channel.queue_declare(queue, durable=True, auto_delete=False)
        # A commit whose acknowledgement the failover cut off leaves its fires committed but unpublished: the
        # recovery sweep publishes them once they are this many seconds past their instant.
        env = celery_env(ha, schema, amqp_url, queue, extra={"runledger_recovery_grace": 10})
        beats = [start_beat(env, f"failover{i}") for i in range(2)]
        with connect(pair.primary.dsn, schema, autocommit=True) as old:
            wait_for(lambda: old.execute("SELECT count(*) AS n FROM jobs WHERE sent_at IS NOT NULL")
                     .fetchone()["n"] >= SCHEDULES * BEFORE, timeout=BEFORE + 30, interval=0.2,
                     message="fires going out before the failover")
        pair.fail_over(old_primary)
        new = connect(pair.dsn, schema, autocommit=True)
        try:
            promoted = new.execute("SELECT now() AS t").fetchone()["t"]
            resumed = wait_for(lambda: new.execute("SELECT min(scheduled_for) AS t FROM jobs WHERE sent_at > %s",
                                                   (promoted,)).fetchone()["t"],
                               timeout=RESUME_WITHIN + 10, interval=0.2, message="fires after the promotion")
            first_sent = new.execute("SELECT min(sent_at) AS t FROM jobs WHERE sent_at > %s",
                                     (promoted,)).fetchone()["t"]
            logs = "\n".join(b.log()[-3000:] for b in beats)
            print(f"failover: first fire after the promotion sent {(first_sent - promoted).total_seconds():.2f} s "
                  "after it")
            assert (first_sent - promoted).total_seconds() <= RESUME_WITHIN, logs
            end = resumed + timedelta(seconds=AFTER)
            wait_for(lambda: new.execute("SELECT now() > %s AS done", (end + timedelta(seconds=2),))
                     .fetchone()["done"], timeout=AFTER + 30, interval=0.5, message="the window after resuming")
            assert all(b.alive() for b in beats), logs
            wait_for(lambda: new.execute("SELECT count(*) AS n FROM jobs WHERE scheduled_for < %s AND status = "
                                         "'pending'", (end,)).fetchone()["n"] == 0,
                     timeout=30, interval=0.5, message="every committed fire published")
            logs = [b.log() for b in beats]
            for b, log in zip(beats, logs, strict=True):
                b.stop()  # each lost Postgres and found it again (the new primary)
                assert "Postgres unavailable" in log and "Postgres reachable again" in log, log[-3000:]
                if old_primary == "read-only":
                    assert "read-only transaction" in log, log[-3000:]

            # every slot after the resumption once
            after = new.execute("SELECT schedule_name, scheduled_for FROM jobs WHERE scheduled_for >= %s"
                                " AND scheduled_for < %s", (resumed, end)).fetchall()
            assert Counter(Counter(r["schedule_name"] for r in after).values()) == {AFTER: SCHEDULES}, logs
            # every message published has its ledger row on the new primary, and no row went out twice
            queued = _queued_ids(amqp_url, queue)
            assert len(queued) >= SCHEDULES * (BEFORE + AFTER)
            assert len(set(queued)) == len(queued), [i for i, n in Counter(queued).items() if n > 1]
            rows = {str(r["id"]) for r in new.execute("SELECT id FROM jobs WHERE id::text = ANY(%s)",
                                                      (queued,)).fetchall()}
            assert rows == set(queued), sorted(set(queued) - rows)
            sent = {str(r["id"]) for r in new.execute("SELECT id FROM jobs WHERE scheduled_for < %s",
                                                      (end,)).fetchall()}
            assert sent <= set(queued)  # every fire committed on the new primary went out
        finally:
            new.close()
    finally:
        for b in beats:
            b.stop()
        delete_queue(amqp_url, queue)
        pair.close()
