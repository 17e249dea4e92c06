"""Lag: 1,000 schedules firing at spread-out seconds for two minutes; how late does each fire leave?

Schedule i fires every minute at second i mod 60 (6-field cron), so every
second of the run has about 17 fires. A consumer on the queue records when each
message arrives; lag = arrival - scheduled_for (from the message's ``_schedule``
header). Arrival comes after the publish, so this bounds the publish lag from
above. The ledger's ``sent_at`` (stamped after the broker's confirm) is
reported beside it.

    .venv/bin/python bench/bench_lag.py --schedules 1000 --seconds 120
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import contextlib
import socket

from kombu import Connection  # noqa: E402

from bench.common import (  # noqa: E402
    AMQP,
    DSN,
    celery_env,
    connect,
    db_offset,
    declare_queue,
    delete_queue,
    drop_schema,
    emit,
    fresh_schema,
    start,
    stop,
    token,
)
from runledger_beat.timing.engine import Timing, next_fire_after  # noqa: E402

LEAD = 8.0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


class Arrivals(threading.Thread):
    """Consumes the queue (no acks, nothing decoded but the headers), noting (arrival wall time, scheduled_for).

    Plain py-amqp rather than a kombu Consumer: acking and decoding each body
    costs a few hundred microseconds here, enough to queue a burst of 100
    arrivals behind each other and measure the consumer instead of beat.
    """

    def __init__(self, queue: str) -> None:
        super().__init__(daemon=True)
        self.queue, self.seen, self.stopping = queue, [], threading.Event()

    def run(self) -> None:
        with Connection(AMQP) as conn:
            channel = conn.connection.channel()

            def on_message(message) -> None:
                self.seen.append((time.time(), message.headers["_schedule"]["scheduled_for"]))

            channel.basic_consume(self.queue, callback=on_message, no_ack=True)
            while not self.stopping.is_set():
                with contextlib.suppress(TimeoutError, socket.timeout):
                    conn.connection.drain_events(timeout=0.2)


def lag(schedules: int = 1000, seconds: float = 120) -> dict:
    schema, queue = fresh_schema(), f"benchq_{token()}"
    declare_queue(queue)
    log = Path(tempfile.mkstemp(prefix="bench-lag-", suffix=".log")[1])
    procs = []
    consumer = Arrivals(queue)
    try:
        with connect(DSN, schema, autocommit=True) as db:
            now = db.execute("SELECT now() AS t").fetchone()["t"]
            first = now + timedelta(seconds=LEAD)
            with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at)"
                                  " FROM STDIN") as copy:
                for i in range(schedules):
                    sid, expr = uuid.uuid4(), f"{i % 60} * * * * *"
                    cursor = next_fire_after(Timing("cron", cron=expr).validate(), first, sid)
                    copy.write_row((sid, f"l{i}", "bench.noop", "cron", expr, cursor))
            offset = db_offset(db)
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue)
        procs.append(start([sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                            "--loglevel", "WARNING", "--pidfile="], env, log))
        consumer.start()
        window_start, window_end = first, first + timedelta(seconds=seconds)
        time.sleep(max(0.0, window_end.timestamp() - offset - time.time() + 2.0))
        consumer.stopping.set()
        consumer.join(5)
        lags = [arrived + offset - datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
                for arrived, s in consumer.seen
                if window_start <= datetime.fromisoformat(s.replace("Z", "+00:00")) < window_end]
        with connect(DSN, schema, autocommit=True) as db:
            sent = [r["lag"] for r in db.execute(
                "SELECT extract(epoch FROM sent_at - scheduled_for)::float8 AS lag FROM jobs"
                " WHERE scheduled_for >= %s AND scheduled_for < %s AND sent_at IS NOT NULL",
                (window_start, window_end)).fetchall()]
        expected = schedules * int(seconds) // 60
        if not lags:
            raise RuntimeError(f"no fires arrived; beat log:\n{log.read_text(errors='replace')[-2000:]}")
        ms = [1000 * x for x in lags]
        return emit({
            "bench": "lag", "schedules": schedules, "seconds": seconds, "fires": len(ms), "expected": expected,
            "p50_ms": round(statistics.median(ms), 1), "p99_ms": round(_percentile(ms, 0.99), 1),
            "max_ms": round(max(ms), 1), "min_ms": round(min(ms), 1),
            "sent_at_p50_ms": round(1000 * statistics.median(sent), 1) if sent else None,
            "sent_at_p99_ms": round(1000 * _percentile(sent, 0.99), 1) if sent else None,
        })
    finally:
        consumer.stopping.set()
        stop(procs)
        log.unlink(missing_ok=True)
        delete_queue(queue)
        drop_schema(schema)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=120)
    args = parser.parse_args()
    return lag(args.schedules, args.seconds)


if __name__ == "__main__":
    main()
