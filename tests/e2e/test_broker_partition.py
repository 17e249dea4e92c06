"""A real beat cut off from RabbitMQ (a partition: sockets open, nothing relayed) keeps recording, then catches up.

Beat waits CONFIRM_TIMEOUT for the confirms that will not come, and its attempts to
reconnect (held open, never answered) time out; it then goes on recording fires,
which stay `pending`. It never waits on the dead connection for good: py-amqp's
close would await the broker's reply forever (a hang found by this test).
After the heal every fire of the cut is published, beat is back on time, and
every fire marked sent is in the queue.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import pytest

from runledger_beat.publish.amqp import CONFIRM_TIMEOUT

from ..support.e2e import count, delete_queue, prepare, queued_ids
from ..support.netcut import Proxy
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for

pytestmark = pytest.mark.slow(seconds=35)

SCHEDULES = 3
CUT_SECONDS = 15


@pytest.mark.parametrize("road", ["fast path", "celery producer"])
def test_a_beat_cut_off_from_rabbitmq_keeps_recording_and_publishes_every_fire_after_the_heal(
        db, pg_dsn, schema, amqp_url, road):
    """Both roads to RabbitMQ: the fast path, and Celery's own producer (with task-sent events on, as Flower
    users run it), where a message written into the dead socket must not count as sent."""
    parts = urlsplit(amqp_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5672))
    behind = urlunsplit(parts._replace(netloc=f"{parts.username}:{parts.password}@127.0.0.1:{proxy.port}"))
    extra = {"runledger_recovery_grace": 2, "runledger_send_sent_events": road == "celery producer"}
    env, queue = prepare(db, pg_dsn, schema, behind, extra=extra)
    for i in range(SCHEDULES):
        insert_schedule(db, f"tick{i}")
    beat = start_beat(env, "cut")
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") >= 2 * SCHEDULES,
                 timeout=30, message="fires sent before the cut")
        cut_at = _now(db)
        proxy.cut()
        # The confirms stop; beat gives up on them and on reconnecting (attempts held open, never answered).
        wait_for(lambda: "broker unavailable" in beat.log(), timeout=2 * CONFIRM_TIMEOUT + 10,
                 message="beat to notice the broker is gone")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for > %s",
                               cut_at + timedelta(seconds=CUT_SECONDS)) >= SCHEDULES,
                 timeout=CUT_SECONDS + 20, message="beat to go on recording fires through the cut")
        assert count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for > %s AND status = 'sent'",
                     cut_at + timedelta(seconds=1)) == 0  # no confirm crossed the cut
        proxy.heal()
        healed_at = _now(db)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for <= %s"
                                   " AND status NOT IN ('sent', 'skipped')", healed_at) == 0,
                 timeout=60, message="every fire of the cut published after the heal")
        back = healed_at + timedelta(seconds=15)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for > %s AND status = 'sent'",
                               back) >= 3 * SCHEDULES, timeout=40, message="fires sent on time after the heal")
        assert beat.alive()
        late = db.execute("SELECT max(sent_at - scheduled_for) AS late FROM jobs WHERE scheduled_for > %s"
                          " AND status = 'sent'", (back,)).fetchone()["late"]
        assert late < timedelta(seconds=1)
        sent = {str(r["id"]) for r in db.execute("SELECT id FROM jobs WHERE status = 'sent'").fetchall()}
        assert count(db, "SELECT count(*) AS n FROM jobs WHERE scheduled_for BETWEEN %s AND %s AND status = 'sent'",
                     cut_at + timedelta(seconds=1), healed_at) >= SCHEDULES
        assert sent <= set(queued_ids(amqp_url, queue))  # every fire marked sent is in the queue
    except BaseException:
        print(beat.log()[-4000:])  # what beat said, for the failure report
        raise
    finally:
        beat.stop()
        proxy.close()
        delete_queue(amqp_url, queue)


def _now(db):
    return db.execute("SELECT now() AS t").fetchone()["t"]
