"""A million schedules: 1,000,000 daily cron schedules spread over the day, plus every-second ones, one beat.

The daily schedules are written by raw COPY (no API) into a schema of their own: schedule i fires at
minute i mod 1440 of the UTC day (about 694 per minute). A few every-second schedules (6-field cron) run
beside them. One ``celery beat -S runledger`` then runs for ``--minutes``; a consumer on the queue notes
when each message arrives. Reported: time from beat's start to its first fire; the every-second fires' lag
(arrival minus instant, from a second after that first fire) p50/p99/max, apart from those on a minute, which
share their instant with that minute's ~694 daily fires and leave with them (their p50 and max are reported
beside); whether every daily fire due in the window was recorded in the ledger and arrived exactly once; beat's
RSS (sampled every few seconds).

``--repeat R`` runs beat R times, one after another, on the same schedules (fires caught up at each start,
their instants in the gap between runs, are left out); the summary gives each figure's median and min-max.
First, for ``--baseline-minutes``, the same beat runs with the every-second schedules alone: the same-run
baseline for the lag and the RSS.

``--ledger-rows N`` first writes N finished ledger rows (spread over the past days) beside the schedules, for
the "beside a big ledger" run. ``--keep`` leaves the schema in place (drop it afterwards: it is gigabytes).

    flock /tmp/runledger-heavy.lock .venv/bin/python bench/bench_million.py --minutes 5 --repeat 3
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kombu import Connection  # noqa: E402

from bench.bench_lag import Arrivals, _percentile  # noqa: E402
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
    status_kb,
    stop,
    token,
)

#: Daily slots: one per minute of the day.
SLOTS = 1440
#: Seconds between RSS samples.
RSS_EVERY = 5.0


class NamedArrivals(Arrivals):
    """Arrivals noting (arrival wall time, (schedule name, scheduled_for)) for each message."""

    def run(self) -> None:
        with Connection(AMQP) as conn:
            channel = conn.connection.channel()

            def on_message(message) -> None:
                meta = message.headers["_schedule"]
                self.seen.append((time.time(), (meta["schedule_name"], meta["scheduled_for"])))

            channel.basic_consume(self.queue, callback=on_message, no_ack=True)
            while not self.stopping.is_set():
                with contextlib.suppress(TimeoutError, socket.timeout):
                    conn.connection.drain_events(timeout=0.2)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def daily_cursor(slot: int, after: datetime) -> datetime:
    """The first instant of daily slot ``slot`` (minute of the UTC day) strictly after ``after``."""
    day = after.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    at = day + timedelta(minutes=slot)
    return at if at > after else at + timedelta(days=1)


def write_schedules(db, n: int, every_second: int, now: datetime) -> dict[int, datetime]:
    """COPY ``n`` daily schedules and ``every_second`` every-second ones; returns each slot's cursor."""
    cursors = {slot: daily_cursor(slot, now) for slot in range(SLOTS)}
    with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at) FROM STDIN") as copy:
        for i in range(n):
            slot = i % SLOTS
            copy.write_row((uuid.uuid4(), f"d{i:07d}", "bench.noop", "cron", f"{slot % 60} {slot // 60} * * *",
                            cursors[slot]))
        first = now.replace(microsecond=0) + timedelta(seconds=1)
        for i in range(every_second):
            copy.write_row((uuid.uuid4(), f"e{i}", "bench.noop", "cron", "* * * * * *", first))
    db.execute("ANALYZE job_schedules")
    return cursors


def write_ledger(db, rows: int) -> float:
    """``rows`` finished ledger rows of past days (set-based, in the server); returns the seconds it took."""
    began = time.monotonic()
    db.execute("SELECT runledger_maintain_ledger(NULL, 2)")
    step = 1_000_000
    for start_at in range(0, rows, step):
        db.execute(
            "INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,"
            " created_at, sent_at, started_at, finished_at)"
            " SELECT gen_random_uuid(), NULL, 'old', t, 'bench.noop', '{\"args\": [], \"kwargs\": {}}', 'manual',"
            " 'success', t, t, t, t"
            "  FROM (SELECT now() - make_interval(secs => 86400.0 * 20 * g / %(rows)s) AS t"
            "          FROM generate_series(%(a)s, %(b)s) g) s",
            {"rows": rows, "a": start_at, "b": min(rows, start_at + step) - 1})
    db.execute("ANALYZE jobs")
    return time.monotonic() - began


def one_run(schema: str, queue: str, schedules: int, minutes: float) -> dict:
    """One beat on ``schema`` for ``minutes``: its figures (see the module docstring)."""
    log = Path(tempfile.mkstemp(prefix="bench-million-", suffix=".log")[1])
    consumer = NamedArrivals(queue)
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            offset = db_offset(db)
        consumer.start()
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue)
        started = time.time()
        beat = start([sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                      "--loglevel", "WARNING", "--pidfile="], env, log)
        procs.append(beat)
        window_start = datetime.fromtimestamp(started + offset, timezone.utc)
        window_end = window_start + timedelta(minutes=minutes)
        rss: list[int] = []
        while time.time() + offset < window_end.timestamp() + 3.0:
            if beat.poll() is not None:
                raise RuntimeError(f"beat exited:\n{log.read_text(errors='replace')[-2000:]}")
            rss.append(status_kb(beat.pid, "VmRSS"))
            time.sleep(RSS_EVERY)
        consumer.stopping.set()
        consumer.join(5)
        seen = list(consumer.seen)
        if not seen:
            raise RuntimeError(f"no fires arrived; beat log:\n{log.read_text(errors='replace')[-2000:]}")
        # Fires caught up at start (their instant before the window: the gap between runs) are left out.
        first_arrival = min(arrived for arrived, (_, at) in seen if _instant(at) >= window_start)
        with connect(DSN, schema, autocommit=True) as db:
            ledger = db.execute(
                "SELECT count(*) AS n, count(*) FILTER (WHERE status IN ('sent', 'success')) AS sent"
                "  FROM jobs WHERE stage = 'scheduled' AND scheduled_for >= %s AND scheduled_for < %s"
                "   AND schedule_name LIKE 'd%%'", (window_start, window_end)).fetchone()
        per_slot = schedules // SLOTS
        expected = sum(per_slot + (1 if slot < schedules % SLOTS else 0)
                       for slot in range(SLOTS)
                       if window_start <= daily_cursor(slot, window_start - timedelta(microseconds=1)) < window_end)
        # Lag is judged from a second after beat's first fire: before it, beat is still starting.
        lag_from = datetime.fromtimestamp(first_arrival + offset + 1.0, timezone.utc)
        lags, shared, daily = [], [], Counter()
        for arrived, (name, at) in seen:
            instant = _instant(at)
            if not window_start <= instant < window_end:
                continue
            if name.startswith("e"):
                if instant < lag_from:
                    continue
                # On a minute the every-second fire shares its instant with that minute's ~694 daily fires.
                (shared if instant.second == 0 and schedules else lags).append(
                    1000 * (arrived + offset - instant.timestamp()))
            else:
                daily[(name, at)] += 1
        ms, together = sorted(lags), sorted(shared)
        return emit({
            "bench": "million-run", "schedules": schedules, "minutes": minutes,
            "first_fire_s": round(first_arrival - started, 2),
            "every_second_fires": len(ms),
            "lag_p50_ms": round(statistics.median(ms), 1) if ms else None,
            "lag_p99_ms": round(_percentile(ms, 0.99), 1) if ms else None,
            "lag_max_ms": round(max(ms), 1) if ms else None,
            "shared_instant_fires": len(together),
            "shared_instant_lag_p50_ms": round(statistics.median(together), 1) if together else None,
            "shared_instant_lag_max_ms": round(max(together), 1) if together else None,
            "daily_expected": expected, "daily_recorded": ledger["n"], "daily_marked_sent": ledger["sent"],
            "daily_arrived": len(daily), "daily_duplicates": sum(c - 1 for c in daily.values() if c > 1),
            "rss_peak_mb": round(max(rss) / 1024, 1), "rss_last_mb": round(rss[-1] / 1024, 1),
            "rss_first_mb": round(rss[1 if len(rss) > 1 else 0] / 1024, 1),
        })
    finally:
        consumer.stopping.set()
        stop(procs)
        log.unlink(missing_ok=True)


def _spread(runs: list[dict], key: str) -> list | None:
    """[median, min, max] of ``key`` over the runs."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return [round(statistics.median(values), 2), min(values), max(values)] if values else None


def million(schedules: int = 1_000_000, every_second: int = 3, minutes: float = 5.0, ledger_rows: int = 0,
            keep: bool = False, repeat: int = 1, baseline_minutes: float = 1.0) -> dict:
    """The baseline (the every-second schedules alone, for ``baseline_minutes``), then ``repeat`` runs of one
    beat beside the written schedules, one after another on the same schema; medians and ranges."""
    baseline = None
    if baseline_minutes > 0:
        schema, queue = fresh_schema(), f"benchq_{token()}"
        declare_queue(queue)
        try:
            with connect(DSN, schema, autocommit=True) as db:
                write_schedules(db, 0, every_second, db.execute("SELECT now() AS t").fetchone()["t"])
            baseline = one_run(schema, queue, 0, baseline_minutes)
        finally:
            delete_queue(queue)
            drop_schema(schema)
    schema, queue = fresh_schema(), f"benchq_{token()}"
    declare_queue(queue)
    try:
        with connect(DSN, schema, autocommit=True) as db:
            ledger_s = write_ledger(db, ledger_rows) if ledger_rows else 0.0
            began = time.monotonic()
            now = db.execute("SELECT now() AS t").fetchone()["t"] + timedelta(seconds=5)
            write_schedules(db, schedules, every_second, now)
            copy_s = time.monotonic() - began
        runs = [one_run(schema, queue, schedules, minutes) for _ in range(repeat)]
    finally:
        delete_queue(queue)
        if not keep:
            drop_schema(schema)
    keys = ("first_fire_s", "lag_p50_ms", "lag_p99_ms", "lag_max_ms", "shared_instant_lag_p50_ms",
            "shared_instant_lag_max_ms", "rss_first_mb", "rss_peak_mb")
    return emit({
        "bench": "million", "schedules": schedules, "every_second": every_second, "minutes": minutes,
        "runs": len(runs), "ledger_rows": ledger_rows, "ledger_write_s": round(ledger_s, 1), "copy_s": round(copy_s, 1),
        **{key: _spread(runs, key) for key in keys},
        "daily_expected": sum(r["daily_expected"] for r in runs),
        "daily_recorded": sum(r["daily_recorded"] for r in runs),
        "daily_marked_sent": sum(r["daily_marked_sent"] for r in runs),
        "daily_arrived": sum(r["daily_arrived"] for r in runs),
        "daily_duplicates": sum(r["daily_duplicates"] for r in runs),
        "baseline": baseline and {k: baseline[k] for k in ("every_second_fires", "lag_p50_ms", "lag_p99_ms",
                                                           "lag_max_ms", "rss_peak_mb", "first_fire_s")},
    })


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1_000_000)
    parser.add_argument("--every-second", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--ledger-rows", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="leave the schema in place (drop it afterwards)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of one beat, one after another, same schema")
    parser.add_argument("--baseline-minutes", type=float, default=1.0,
                        help="first, the every-second schedules alone for this long (0: no baseline)")
    args = parser.parse_args()
    return million(args.schedules, args.every_second, args.minutes, args.ledger_rows, args.keep, args.repeat,
                   args.baseline_minutes)


if __name__ == "__main__":
    main()
