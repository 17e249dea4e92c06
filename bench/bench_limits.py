"""Limits: how fast RabbitMQ takes messages from a raw kombu producer, from Celery's send_task, and at most.

Each publishes N persistent messages to a fresh durable queue on one connection,
timed from the first publish until all N are in the queue (the same finish line
as the burst benchmark). The call loop alone is reported too. The broker ceiling
is runledger's own publisher with nothing else to do: N stock Celery messages
encoded beforehand, then written with windowed confirms; no publisher of these
messages can beat it, so a burst can only approach it.

    .venv/bin/python bench/bench_limits.py --n 10000
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from celery import Celery  # noqa: E402
from kombu import Connection, Exchange, Producer  # noqa: E402

from bench.common import AMQP, DepthProbe, Watch, declare_queue, delete_queue, emit, token  # noqa: E402
from runledger_beat.publish.dispatcher import Dispatcher  # noqa: E402
from runledger_beat.publish.fires import Fire  # noqa: E402


def _until_queued(queue: str, n: int, publish_all) -> tuple[float, float]:
    """(seconds for the publish loop, seconds until all n are queued), the depth watched meanwhile."""
    depth = DepthProbe(queue)
    try:
        started = time.time()
        watch = Watch(depth, n, started, started + 60)
        watch.start()
        publish_all()
        looped = time.time() - started
        watch.join()
        if watch.reached is None:
            raise RuntimeError(f"only {watch.last} of {n} messages reached {queue}")
        return looped, watch.reached - started
    finally:
        depth.close()


@contextmanager
def _fresh_queue(prefix: str) -> Iterator[str]:
    queue = f"{prefix}_{token()}"
    declare_queue(queue)
    try:
        yield queue
    finally:
        delete_queue(queue)


def _report(what: str, n: int, looped: float, queued: float) -> dict:
    return emit({"bench": "limits", "what": what, "n": n, "per_s": round(n / queued),
                 "call_loop_per_s": round(n / looped)})


def raw_kombu(n: int) -> dict:
    """Raw kombu Producer.publish of a small JSON body, persistent, default exchange."""
    with _fresh_queue("bench_raw") as queue, Connection(AMQP) as conn:
        producer = Producer(conn.default_channel, exchange=Exchange("", type="direct"))

        def publish_all() -> None:
            for i in range(n):
                producer.publish({"i": i}, routing_key=queue, serializer="json", delivery_mode=2)

        return _report("raw kombu publish", n, *_until_queued(queue, n, publish_all))


def send_task(n: int) -> dict:
    """Celery's app.send_task on one producer, as a user's code would send N tasks."""
    app = Celery("bench_limits", broker=AMQP)
    with _fresh_queue("bench_send") as queue, app.producer_or_acquire() as producer:
        def publish_all() -> None:
            for i in range(n):
                app.send_task("bench.noop", (i,), queue=queue, producer=producer)

        return _report("celery send_task", n, *_until_queued(queue, n, publish_all))


def broker_ceiling(n: int, idle: float = 0.0) -> dict:
    """N stock Celery task messages, built and encoded first, then written as fast as confirms allow.

    With ``idle`` the queue is declared, the publisher connected and the messages
    encoded that many seconds before the write, as at a burst's first boundary
    (the burst declares its queue and starts beat 15 s before the instant): the
    ceiling under the conditions beat meets there, reported as "broker ceiling,
    idle first".
    """
    app = Celery("bench_limits", broker=AMQP)
    dispatcher = Dispatcher(app)
    now = datetime.now(timezone.utc)
    fires = [Fire(uuid.uuid4(), uuid.uuid4(), f"s{i}", "bench.noop",
                  {"args": [], "kwargs": {}, "_schedule": {"schedule_id": str(uuid.uuid4()), "schedule_name": f"s{i}",
                                                           "scheduled_for": now.strftime("%Y-%m-%dT%H:%M:%SZ")}},
                  {}, now) for i in range(n)]
    with _fresh_queue("bench_ceiling") as queue:
        app.conf.task_default_queue = queue
        try:
            ready = dispatcher.prepare(fires)
            time.sleep(idle)

            def publish_all() -> None:
                dispatcher.send(ready)
                dispatcher.collect(wait=True)

            what = f"broker ceiling, idle first {idle:g} s" if idle else "broker ceiling"
            return _report(what, n, *_until_queued(queue, n, publish_all))
        finally:
            dispatcher.close()


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    args = parser.parse_args()
    return [raw_kombu(args.n), send_task(args.n), broker_ceiling(args.n)]


if __name__ == "__main__":
    main()
