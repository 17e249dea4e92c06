"""Broker outages under two real beats: a RabbitMQ stop (classic and quorum queues), a RabbitMQ node restart, a
Redis restart, each on a private broker of the test's own.

While the broker is away the beats stay up and go on recording every slot, which waits in the ledger as
`pending`; once it is back every one is published, each message exactly once (the queue, read after the
schedules stop, holds every ledger id once and nothing else), and no slot of the window is missing.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

import pytest
import redis

from ..support.e2e import count, prepare, queued_ids
from ..support.private import RedisServer
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for

pytestmark = pytest.mark.slow(seconds=35)

SCHEDULES = 3
OUTAGE = 10  # seconds the broker stays away


#: Fires of the last three whole-second slots sent within half a second of their slot (a row's first fire, at its
#: INSERT's now(), is not on a whole second).
ON_TIME = ("SELECT count(*) AS n FROM jobs WHERE status = 'sent' AND sent_at - scheduled_for < interval '0.5 s'"
           " AND scheduled_for = date_trunc('second', scheduled_for)"
           " AND scheduled_for >= date_trunc('second', now()) - interval '3 s'"
           " AND scheduled_for < date_trunc('second', now())")


def _now(db):
    return db.execute("SELECT now() AS t").fetchone()["t"]


def _redis_ids(url: str, queue: str) -> list[str]:
    return [json.loads(raw)["headers"]["id"] for raw in redis.Redis.from_url(url).lrange(queue, 0, -1)]


def _outage_loses_and_doubles_nothing(db, pg_dsn: str, schema: str, url: str, away: Callable[[], None],
                                      back: Callable[[], None], queued: Callable[[str, str], list[str]],
                                      extra: dict | None = None) -> None:
    """Two beats fire every second; ``away()`` takes the broker away for OUTAGE seconds, ``back()`` returns it;
    ``queued(url, queue)`` reads every message id the queue holds."""
    env, queue = prepare(db, pg_dsn, schema, url, extra={"runledger_recovery_grace": 2, **(extra or {})})
    ids = [insert_schedule(db, f"out{i}") for i in range(SCHEDULES)]
    beats = [start_beat(env, f"outage{i}") for i in range(2)]
    try:
        wait_for(lambda: count(db, ON_TIME) >= SCHEDULES * 3, timeout=40, message="the beats firing on time")
        # Slots are judged from here: a beat starting on a loaded host may fire its first slots more than a second
        # late, and the cursor then moves to the next future slot, as after any outage of beat itself.
        steady = _now(db)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent' AND scheduled_for >= %s",
                               steady) >= 2 * SCHEDULES, timeout=40, message="fires sent before the outage")
        away()
        down_at = _now(db)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending' AND scheduled_for > %s",
                               down_at) >= 2 * SCHEDULES, timeout=OUTAGE + 20,
                 message="fires recorded pending while the broker is away")
        wait_for(lambda: _now(db) >= down_at + timedelta(seconds=OUTAGE), timeout=OUTAGE + 20, interval=0.2,
                 message="the outage to last")
        assert all(b.alive() for b in beats)
        back()
        up_at = _now(db)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for > %s AND status = 'sent'",
                               up_at + timedelta(seconds=3)) >= SCHEDULES, timeout=60,
                 message="fires sent on time after the broker returned")
        db.execute("UPDATE job_schedules SET is_active = false")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status <> 'sent'") == 0, timeout=60,
                 message="every fire of the outage published")
        assert all(b.alive() for b in beats)
        for sid in ids:  # every slot from before the outage to the last, once: nothing coalesced, nothing twice
            slots = [r["scheduled_for"] for r in db.execute(
                "SELECT scheduled_for FROM jobs WHERE schedule_id = %s ORDER BY 1", (sid,)).fetchall()]
            assert len(slots) == len(set(slots))
            whole = [t for t in slots if t >= steady]
            assert whole == [whole[0] + timedelta(seconds=k) for k in range(len(whole))]
            assert whole[0] < down_at and whole[-1] > up_at
        waited = count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for BETWEEN %s AND %s", down_at, up_at)
        assert waited >= SCHEDULES * (OUTAGE - 1)
        ledger = {str(r["id"]) for r in db.execute("SELECT id FROM jobs").fetchall()}
        messages = Counter(queued(url, queue))
        assert [i for i, n in messages.items() if n > 1] == []  # no message published twice
        assert set(messages) == ledger  # every fire's message, and nothing else
    except BaseException:
        for beat in beats:
            print(beat.log()[-3000:])
        raise
    finally:
        for beat in beats:
            beat.stop()


@pytest.mark.parametrize("queue_type", ["classic", "quorum"])
def test_a_rabbitmq_stop_publishes_every_waiting_fire_once(db, pg_dsn, schema, private_rabbit, queue_type):
    """The broker application stops and starts (connections dropped, nothing listening); quorum queues are
    declared by the fast path and take its confirmed publishes like classic ones."""
    _outage_loses_and_doubles_nothing(db, pg_dsn, schema, private_rabbit.url, private_rabbit.stop_app,
                                      private_rabbit.start_app, queued_ids,
                                      extra={"task_default_queue_type": queue_type})
    # Every queue on the node is of the type asked for: the fast path declared the task queue as quorum.
    assert set(private_rabbit.queue_types().values()) == {queue_type}


def test_a_rabbitmq_node_restart_publishes_every_waiting_fire_once(db, pg_dsn, schema, private_rabbit):
    """The whole node goes down and comes back: the durable queue keeps every message confirmed before."""
    _outage_loses_and_doubles_nothing(db, pg_dsn, schema, private_rabbit.url, private_rabbit.stop_node,
                                      private_rabbit.start_node, queued_ids)


def test_a_redis_restart_publishes_every_waiting_fire_once(db, pg_dsn, schema):
    server = RedisServer()
    try:
        _outage_loses_and_doubles_nothing(db, pg_dsn, schema, server.url, server.stop, server.start, _redis_ids)
    finally:
        server.close()


def test_private_redis_keeps_its_queue_across_a_restart():
    """The private server persists writes, so a queue read after a restart is what the beats left."""
    server = RedisServer()
    try:
        key = f"k{uuid.uuid4().hex[:6]}"
        redis.Redis.from_url(server.url).rpush(key, "a", "b")
        server.restart()
        assert redis.Redis.from_url(server.url).lrange(key, 0, -1) == [b"a", b"b"]
    finally:
        server.close()
