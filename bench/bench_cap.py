"""Storm control: a 10,000-fire instant under runledger_max_fires_per_second, and uncapped bursts beside the ceiling.

Capped: N one-off schedules share one instant (a microsecond apart, so there is an order to keep); one beat with
the cap; a consumer notes each message's arrival. Reported: the spread (first to last arrival, and instant to last
arrival), whether arrivals kept scheduled order, how many arrived (each once), the most in any one second.
Uncapped: the same burst with no cap (bench_burst), as a ratio to the broker ceiling (bench_limits) measured in the
same run. Repeated --runs times; medians and min-max.

    flock /tmp/runledger-heavy.lock .venv/bin/python bench/bench_cap.py --n 10000 --cap 2000 --runs 3
"""

from __future__ import annotations

import argparse
import bisect
import json
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_burst import burst  # noqa: E402
from bench.bench_limits import broker_ceiling  # noqa: E402
from bench.bench_million import NamedArrivals, _instant  # noqa: E402
from bench.common import (  # noqa: E402
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

LEAD = 15.0


def capped(n: int, cap: float) -> dict:
    schema, queue = fresh_schema(), f"benchq_{token()}"
    declare_queue(queue)
    log = Path(tempfile.mkstemp(prefix="bench-cap-", suffix=".log")[1])
    consumer = NamedArrivals(queue)
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            due = db.execute("SELECT date_trunc('second', now()) + make_interval(secs => %s) AS t",
                             (LEAD,)).fetchone()["t"]
            with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at)"
                                  " FROM STDIN") as copy:
                for i in range(n):
                    copy.write_row((uuid.uuid4(), f"c{i:06d}", "bench.noop", "cron", "0 0 1 1 *",
                                    due + timedelta(microseconds=i)))
            db.execute("ANALYZE job_schedules")
            offset = db_offset(db)
        consumer.start()
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue,
                         BENCH_EXTRA=json.dumps({"runledger_max_fires_per_second": cap}))
        procs.append(start([sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                            "--loglevel", "WARNING", "--pidfile="], env, log))
        due_local = due.timestamp() - offset
        deadline = due_local + 2 * n / cap + 30
        while len(consumer.seen) < n and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # a duplicate would arrive with the last ones
        consumer.stopping.set()
        consumer.join(5)
        seen = list(consumer.seen)
        with connect(DSN, schema, autocommit=True) as db:
            row = db.execute("SELECT count(*) AS n, max(created_at) AS last_recorded,"
                             " count(*) FILTER (WHERE scheduled_for = %s + make_interval(secs =>"
                             "   substr(schedule_name, 2)::int / 1000000.0)) AS slots_kept FROM jobs",
                             (due,)).fetchone()
        arrivals = [a for a, _ in seen]
        order = [_instant(at) for _, (_, at) in seen]
        names = [name for _, (name, _) in seen]
        most = max(bisect.bisect_left(arrivals, a + 1.0) - i for i, a in enumerate(arrivals)) if arrivals else 0
        return emit({
            "bench": "cap", "n": n, "cap_per_s": cap, "arrived": len(seen), "distinct": len(set(names)),
            "ledger_rows": row["n"], "slots_kept": row["slots_kept"],
            "recorded_s_after_due": round(row["last_recorded"].timestamp() - offset - due_local, 3),
            "in_scheduled_order": order == sorted(order),
            "first_to_last_s": round(arrivals[-1] - arrivals[0], 3) if arrivals else None,
            "due_to_last_s": round(arrivals[-1] - due_local, 3) if arrivals else None,
            "most_in_one_second": most,
        })
    finally:
        consumer.stopping.set()
        stop(procs)
        log.unlink(missing_ok=True)
        delete_queue(queue)
        drop_schema(schema)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--cap", type=float, default=2000.0)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    caps, ratios = [], []
    for _ in range(args.runs):
        caps.append(capped(args.n, args.cap))
        ceiling = broker_ceiling(args.n)["per_s"]
        uncapped = burst(args.n, 1)["fires_per_s"]
        ratios.append(uncapped / ceiling)
    spreads = [c["first_to_last_s"] for c in caps]
    return emit({
        "bench": "cap_summary", "n": args.n, "cap_per_s": args.cap, "runs": args.runs,
        "spread_median_s": statistics.median(spreads), "spread_range_s": [min(spreads), max(spreads)],
        "due_to_last_median_s": statistics.median(c["due_to_last_s"] for c in caps),
        "all_in_order": all(c["in_scheduled_order"] for c in caps),
        "none_lost": all(c["arrived"] == c["distinct"] == c["ledger_rows"] == args.n for c in caps),
        "most_in_one_second_max": max(c["most_in_one_second"] for c in caps),
        "uncapped_to_ceiling_median": round(statistics.median(ratios), 3),
        "uncapped_to_ceiling_range": [round(min(ratios), 3), round(max(ratios), 3)],
    })


if __name__ == "__main__":
    main()
