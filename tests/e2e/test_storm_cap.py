"""Storm control: runledger_max_fires_per_second spreads a big instant's publishing, in scheduled order, none lost."""

from __future__ import annotations

import bisect
import contextlib
import socket
import threading
import time
from datetime import datetime

import pytest
from kombu import Connection

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.services import wait_for

FIRES = 2000
CAP = 500
ONCE = "0 0 1 1 *"  # after its first fire the cursor moves a year on


class Arrivals(threading.Thread):
    """Consumes the queue (no acks), noting (arrival time, task id, scheduled_for) of each message."""

    def __init__(self, url: str, queue: str) -> None:
        super().__init__(daemon=True)
        self.url, self.queue, self.seen, self.stopping = url, queue, [], threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        with Connection(self.url) as conn:
            channel = conn.connection.channel()
            channel.queue_declare(self.queue, durable=True, auto_delete=False)

            def on_message(message) -> None:
                meta = message.headers["_schedule"]
                self.seen.append((time.time(), message.headers["id"], meta["scheduled_for"]))

            channel.basic_consume(self.queue, callback=on_message, no_ack=True)
            self.ready.set()
            while not self.stopping.is_set():
                with contextlib.suppress(TimeoutError, socket.timeout):
                    conn.connection.drain_events(timeout=0.2)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.serial
@pytest.mark.disk  # its 10k-fire instant commits tens of megabytes of WAL at once
def test_a_capped_instant_is_recorded_at_once_and_published_spread_in_order(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url, extra={"runledger_max_fires_per_second": CAP})
    consumer = Arrivals(amqp_url, queue)
    consumer.start()
    assert consumer.ready.wait(10)
    beat = start_beat(env)
    try:
        # One instant (within the claim's 50 ms group window), each fire a microsecond apart: an order to keep.
        instant = db.execute("SELECT now() + interval '6 seconds' AS t").fetchone()["t"]
        db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                   " SELECT gen_random_uuid(), 'storm-' || lpad(g::text, 5, '0'), 'rl.record', %s,"
                   "        %s + make_interval(secs => g / 1000000.0)"
                   "   FROM generate_series(0, %s - 1) AS g", (ONCE, instant, FIRES))
        wait_for(lambda: len(consumer.seen) >= FIRES, timeout=60, message=f"{FIRES} messages")
        time.sleep(0.5)  # a duplicate would arrive with the last ones
        seen = list(consumer.seen)
        ledger = db.execute("SELECT id, scheduled_for, created_at FROM jobs").fetchall()
        assert len(seen) == FIRES and {s[1] for s in seen} == {str(r["id"]) for r in ledger}  # none lost, none twice
        order = [_instant(s[2]) for s in seen]
        assert order == sorted(order)  # earliest scheduled first
        arrivals = [s[0] for s in seen]
        assert arrivals[-1] - arrivals[0] >= 3.0  # (FIRES - 1) / CAP = 4 s at the cap
        most = max(bisect.bisect_left(arrivals, a + 1.0) - i for i, a in enumerate(arrivals))
        assert most <= CAP * 1.2, most  # no second carries (much) more than the cap
        # Every fire was recorded at its instant, before the spread publishing began, its slot unchanged.
        last_recorded = max(r["created_at"] for r in ledger)
        assert last_recorded.timestamp() < arrivals[-1] - 2.0
        slots = db.execute("SELECT count(*) AS n FROM jobs j JOIN job_schedules s ON s.id = j.schedule_id"
                           " WHERE j.scheduled_for = %s + make_interval(secs => substr(s.name, 7)::int / 1000000.0)",
                           (instant,)).fetchone()["n"]
        assert slots == FIRES
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'sent'") == FIRES,
                 message="every fire marked sent")
    finally:
        consumer.stopping.set()
        beat.stop()
        consumer.join(5)
        delete_queue(amqp_url, queue)
