"""Burst: N schedules due at the same instant, one or three real `celery beat -S runledger`.

Measured from the due instant (database clock) until every ledger row is
committed and every message sits in the queue; fires/s = N / that time. Beat
publishes a fire only after its row's COMMIT returned, so the moment the queue
holds N messages, the ledger is looked at once: holding every row, the queue's
time is the burst's (``recorded_after_due``, the ledger's own 5 ms poll, is
reported beside it: on two cores, a finer poll would take the CPU it measures).
Also: each beat's peak RSS (VmHWM), duplicate ledger rows, and the queue depth
two seconds later (a duplicate publish would show as more than N messages).

    .venv/bin/python bench/bench_burst.py --n 1000 10000 100000 --beats 1 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    DSN,
    REDIS,
    DepthProbe,
    LedgerProbe,
    RedisDepthProbe,
    Watch,
    celery_env,
    connect,
    db_offset,
    declare_queue,
    delete_queue,
    drop_schema,
    emit,
    fresh_schema,
    insert_schedules,
    start,
    status_kb,
    stop,
    token,
)

LEAD = 15.0  # seconds between creating the schedules and their instant: beats start and prepare meanwhile
#: Past 10k fires, as long as beat's longest lookahead (runledger_max_lookahead, 30 s) plus its start: a running
#: beat prepares a big instant up to that long before it, and a burst measures the instant, not beat's start.
BIG_LEAD = 45.0


def burst(n: int, beats: int, extra: dict | None = None, label: str = "runledger",
          env_extra: dict | None = None, boundaries: int = 1, period: int = 30, broker: str = "amqp",
          on_due: Callable[[float], None] | None = None) -> dict:
    """One burst of ``n`` fires with ``beats`` beats; returns the measurement.

    With ``boundaries`` > 1 the schedules fire every ``period`` seconds (a 6-field
    cron) and each boundary is timed: the first after beat starts, then the steady
    state (``steady_s``: seconds after each later instant until its n fires are in).
    Once a boundary's n messages are counted the queue is purged, so every boundary
    is published into an empty queue, as the broker ceiling is (and as workers keep
    a queue in production): RabbitMQ alone, fed by the ceiling's own publisher,
    takes 10k messages into a queue already holding 10k at 0.80-1.21 of its rate
    into an empty one (3 runs), which would be measured as beat's.
    ``broker`` "redis" runs the beats on Redis and counts the queue's list instead.
    ``on_due`` is called with the first instant (local clock) once the beats are started.
    """
    schema, queue = fresh_schema(), f"benchq_{token()}"
    if broker == "redis":
        env_extra = dict(env_extra or {}, BENCH_AMQP=REDIS)
    else:
        declare_queue(queue)
    logs = [Path(tempfile.mkstemp(prefix=f"bench-beat{i}-", suffix=".log")[1]) for i in range(beats)]
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            step = period if boundaries > 1 else 1
            lead = LEAD if n <= 10_000 else BIG_LEAD
            due = db.execute("SELECT to_timestamp(ceil((extract(epoch FROM now()) + %s) / %s) * %s) AS t",
                             (lead, step, step)).fetchone()["t"]
            insert_schedules(db, n, due, cron=f"*/{period} * * * * *" if boundaries > 1 else "0 0 1 1 *")
            offset = db_offset(db)
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue, BENCH_EXTRA=json.dumps(extra or {}),
                         **(env_extra or {}))
        argv = [sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                "--loglevel", os.environ.get("BENCH_LOGLEVEL", "WARNING"), "--pidfile="]
        procs = [start(argv, env, log) for log in logs]
        due_local = due.timestamp() - offset
        if on_due is not None:
            on_due(due_local)
        depth = RedisDepthProbe(queue) if broker == "redis" else DepthProbe(queue)
        # An LLEN costs Redis microseconds: polled every 0.5 ms, it times a 1k burst (about 10 ms) to 5 %.
        every = 0.0005 if broker == "redis" else 0.005
        with connect(DSN, schema, autocommit=True) as db:
            watched = db.execute("SELECT id FROM job_schedules LIMIT 1").fetchone()["id"]
        rows, confirm = LedgerProbe(schema, watched, offset), LedgerProbe(schema, watched, offset)

        def timed(instant: float, queued_n: int, recorded_n: int) -> tuple[float, float, float]:
            """(done, queued, recorded) times of one instant. Done is when the queue is full if the ledger, looked
            at that moment, holds every row (beat publishes a fire only once its row's COMMIT returned); else the
            later of the two watchers. The ledger's own watcher polls every 5 ms."""
            queued = Watch(depth, queued_n, instant, instant + 120, every)
            recorded = Watch(rows, recorded_n, instant, instant + 120)
            queued.start(), recorded.start()
            queued.join()
            all_in = queued.reached is not None and confirm() >= recorded_n
            recorded.join()
            if queued.reached is None or recorded.reached is None:
                raise RuntimeError(f"burst {n}x{beats}: {queued.last} queued, {recorded.last} recorded after 120 s; "
                                   f"beat log: {logs[0].read_text(errors='replace')[-2000:]}")
            return (queued.reached if all_in else max(queued.reached, recorded.reached)), queued.reached, \
                recorded.reached

        done_at, queued_at, recorded_at = timed(due_local, n, n)
        late = done_at - due_local
        first = {"recorded_after_due": round(recorded_at - due_local, 3),
                 "queued_after_due": round(queued_at - due_local, 3)}
        steady, purged = [], 0
        for k in range(2, boundaries + 1):
            purged += depth.purge()
            instant = due_local + (k - 1) * period
            steady.append(round(timed(instant, n, k * n)[0] - instant, 3))
        n_total = n * boundaries
        time.sleep(2)
        stats = rows.conn.execute("SELECT count(*) AS n, count(DISTINCT (schedule_id, scheduled_for)) AS slots"
                                  " FROM jobs").fetchone()
        settled = depth() + purged
        depth.close(), rows.close(), confirm.close()
        return emit({
            "bench": "burst", "scheduler": label, "n": n, "beats": beats, "broker": broker,
            "seconds_after_due": round(late, 3), "fires_per_s": round(n / late),
            **first,
            **({"steady_s": steady, "period_s": period} if steady else {}),
            "ledger_rows": stats["n"], "duplicate_rows": stats["n"] - stats["slots"],
            "queue_depth_after_2s": settled, "duplicate_messages": settled - n_total,
            "peak_rss_mb": round(max(status_kb(p.pid, "VmHWM") for p in procs) / 1024, 1),
        })
    finally:
        stop(procs)
        for log in logs:
            if os.environ.get("BENCH_KEEP_LOGS"):
                print(f"log kept: {log}", file=sys.stderr)
            else:
                log.unlink(missing_ok=True)
        if broker == "redis":
            RedisDepthProbe(queue).drop()
        else:
            delete_queue(queue)
        drop_schema(schema)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--beats", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--extra", default="{}", help="JSON merged into the beats' app.conf")
    parser.add_argument("--receiver", action="store_true", help="connect a before_task_publish receiver (tracing)")
    parser.add_argument("--boundaries", type=int, default=1, help="instants timed (every --period s); 1: one burst")
    parser.add_argument("--period", type=int, default=30)
    parser.add_argument("--broker", choices=["amqp", "redis"], default="amqp")
    args = parser.parse_args()
    env = {"BENCH_RECEIVER": "1"} if args.receiver else None
    results = [burst(n, b, json.loads(args.extra), env_extra=env, boundaries=args.boundaries, period=args.period,
                     broker=args.broker)
               for n in args.n for b in args.beats]
    print("\n| N | beats | s after due | fires/s | peak RSS MB | duplicates |\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['n']:,} | {r['beats']} | {r['seconds_after_due']} | {r['fires_per_s']:,} | {r['peak_rss_mb']} "
              f"| {r['duplicate_rows'] + max(r['duplicate_messages'], 0)} |")
    return results


if __name__ == "__main__":
    main()
