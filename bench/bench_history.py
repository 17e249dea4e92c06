"""History: does beat's cost stay flat as the ledger grows? Lag of every-second fires beside N finished rows.

Fills a ledger with N finished rows (INSERT ... SELECT generate_series in
chunks, spread over the past 30 days in the day partitions a month of beats
would have made, a few hundred schedules), then runs one real `celery beat -S
runledger` with --schedules every-second schedules (10) for --seconds, --repeat times.
A consumer on the queue notes when each message arrives: lag = arrival -
scheduled_for, reported as p50 / p99 / max over all fires of a run; the
ledger's ``sent_at`` (stamped after the broker's publisher confirm, so it also
holds RabbitMQ's fsync) is reported beside it. Also EXPLAIN ANALYZE of each
statement of beat's loop, with its plan's top node and its scans, to show none
scans history. Run with --rows 0 for the same-run baseline.

A filled ledger takes minutes at 50M rows: ``--keep`` leaves it in the schema
``bench_history_<rows>`` and later runs reuse it.

    .venv/bin/python bench/bench_history.py --rows 0 5000000 50000000 --seconds 60 --repeat 3 --keep
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_lag import Arrivals, _percentile  # noqa: E402
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
from runledger_beat.db import (
    migrate,  # noqa: E402
    queries,  # noqa: E402
)

#: The statements beat runs between instants, with the parameters it passes (``ids``: fires of the last run).
LOOP = {
    "claim_due_schedules": {"limit": 1000, "lookahead": 2.0, "group_start": None, "group_window": 0.05},
    "next_due_in": {"lookahead": 2.0},
    "skip_overlapping_fires": {"ids": None},
    "mark_sent": {"ids": None},
    "claim_pending_jobs": {"grace": 30.0, "limit": 1000},
    "mark_lost_runs": {"default_bound": 3600.0},
    "resolve_stale_sent": {"lost_after": 3600.0},
    "unresolved_sent_without_hook": {"older_than": 600.0},
}
#: Rows per INSERT of the fill (one transaction each).
FILL_CHUNK = 2_500_000

FILL = """
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,
                  created_at, sent_at, started_at, finished_at, dispatch_attempts, worker)
SELECT gen_random_uuid(), NULL, 'old-' || (g %% 500), t, 'bench.noop', '{"args": [], "kwargs": {}}', 'scheduled',
       CASE WHEN g %% 50 = 0 THEN 'failure' ELSE 'success' END, t, t, t, t, 1, 'w1'
  FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g,
       LATERAL (SELECT now() - interval '30 days' * (g::float8 / %(n)s)) AS at(t)
"""


def explain(db, name: str, params: dict) -> dict:
    """EXPLAIN ANALYZE one loop statement (rolled back): its time and top plan node."""
    with db.transaction(force_rollback=True):
        plan = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + getattr(queries, name), params).fetchone()
    top = plan["QUERY PLAN"][0]
    return {"statement": name, "ms": round(top["Execution Time"], 2), "plan": top["Plan"]["Node Type"],
            "scans": sorted(_scans(top["Plan"]))}


def _scans(node: dict) -> set[str]:
    found = {f"{node['Node Type']} on {node.get('Relation Name', '?')}"
             + (f" ({node['Index Name']})" if node.get("Index Name") else "")} if "Scan" in node["Node Type"] else set()
    for child in node.get("Plans", []):
        found |= _scans(child)
    return found


def filled_schema(rows: int, keep: bool) -> str:
    """A migrated schema whose ledger holds ``rows`` finished rows (with ``keep``: reused and left behind)."""
    name = f"bench_history_{rows}" if keep else fresh_schema()
    with connect(DSN, "public", autocommit=True) as db:
        migrate(db, name)
    with connect(DSN, name, autocommit=True) as db:
        db.execute("CREATE TABLE IF NOT EXISTS bench_fill (rows bigint NOT NULL)")
        if db.execute("SELECT 1 FROM bench_fill WHERE rows = %s", (rows,)).fetchone():
            return name
        if rows:
            began = time.monotonic()
            # The day partitions a beat running through those 30 days would have made.
            db.execute("SELECT count(*) FROM runledger_maintain_ledger_as_of(NULL, 38, now() - interval '31 days')")
            for lo in range(1, rows + 1, FILL_CHUNK):
                db.execute(FILL, {"lo": lo, "hi": min(rows, lo + FILL_CHUNK - 1), "n": rows})
                print(f"filled {min(rows, lo + FILL_CHUNK - 1):,} of {rows:,} rows"
                      f" ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
            db.execute("VACUUM ANALYZE jobs")  # a partitioned table: every partition
            db.execute("CHECKPOINT")  # the fill's dirty pages written now, not during the measurement
        db.execute("INSERT INTO bench_fill VALUES (%s)", (rows,))
    return name


def run(rows: int, seconds: int, schema: str, schedules: int) -> dict:
    """One measurement in ``schema`` (holding ``rows`` historic ledger rows)."""
    queue, tag = f"benchq_{token()}", token()
    declare_queue(queue)
    log = Path(tempfile.mkstemp(prefix="bench-history-", suffix=".log")[1])
    procs, consumer = [], Arrivals(queue)
    try:
        with connect(DSN, schema, autocommit=True) as db:
            start_at = db.execute("SELECT date_trunc('second', now()) + interval '5 seconds' AS t").fetchone()["t"]
            end_at = start_at + timedelta(seconds=seconds)
            db.execute("DELETE FROM job_schedules")  # an earlier run's
            for i in range(schedules):
                db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                           " VALUES (%s, %s, 'bench.noop', '* * * * * *', %s)",
                           (uuid.uuid4(), f"s{tag}-{i}", start_at))
            offset = db_offset(db)
        consumer.start()
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue)
        argv = [sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                "--loglevel", "WARNING", "--pidfile="]
        procs = [start(argv, env, log)]
        time.sleep(max(0.0, end_at.timestamp() - offset - time.time() + 2.0))
        stop(procs)
        procs = []
        consumer.stopping.set()
        consumer.join(5)
        lags = sorted(1000 * (arrived + offset - datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp())
                      for arrived, s in consumer.seen
                      if start_at <= datetime.fromisoformat(s.replace("Z", "+00:00")) < end_at)
        with connect(DSN, schema, autocommit=True) as db:
            window = {"name": f"s{tag}-%", "a": start_at, "b": end_at}
            sent = sorted(r["lag"] for r in db.execute(
                "SELECT 1000 * extract(epoch FROM sent_at - scheduled_for)::float8 AS lag FROM jobs"
                " WHERE schedule_name LIKE %(name)s AND scheduled_for >= %(a)s AND scheduled_for < %(b)s"
                " AND sent_at IS NOT NULL", window).fetchall())
            ids = [r["id"] for r in db.execute(
                "SELECT id FROM jobs WHERE schedule_name LIKE %(name)s AND scheduled_for >= %(a)s"
                " AND scheduled_for < %(b)s ORDER BY scheduled_for DESC LIMIT %(n)s",
                dict(window, n=schedules)).fetchall()]
            plans = [explain(db, name, {k: (ids if k == "ids" else v) for k, v in params.items()})
                     for name, params in LOOP.items()]
        if not lags:
            raise RuntimeError(f"no fires arrived; beat log: {log.read_text(errors='replace')[-2000:]}")
        return emit({"bench": "history", "rows": rows, "schedules": schedules, "seconds": seconds,
                     "fires": len(lags), "expected": schedules * seconds,
                     "p50_ms": round(statistics.median(lags), 1), "p99_ms": round(_percentile(lags, 0.99), 1),
                     "max_ms": round(lags[-1], 1),
                     "sent_at_p50_ms": round(statistics.median(sent), 1) if sent else None,
                     "sent_at_p99_ms": round(_percentile(sent, 0.99), 1) if sent else None,
                     "loop_statements": plans})
    finally:
        consumer.stopping.set()
        stop(procs)
        log.unlink(missing_ok=True)
        delete_queue(queue)


def measure(rows: int, seconds: int, repeat: int, keep: bool, schedules: int = 10) -> dict:
    """``repeat`` runs beside ``rows`` historic rows: the median run's figures, with the min-max of p99."""
    began = time.monotonic()
    schema = filled_schema(rows, keep)
    filled = time.monotonic() - began
    try:
        runs = [run(rows, seconds, schema, schedules) for _ in range(repeat)]
    finally:
        if not keep:
            drop_schema(schema)
    p99s = sorted(r["p99_ms"] for r in runs)
    middle = dict(sorted(runs, key=lambda r: r["p99_ms"])[len(runs) // 2])
    return emit(dict(middle, bench="history-summary", runs=len(runs), fill_s=round(filled, 1),
                     p99_min_ms=p99s[0], p99_max_ms=p99s[-1],
                     p50_runs_ms=[r["p50_ms"] for r in runs], max_runs_ms=[r["max_ms"] for r in runs]))


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[0, 5_000_000])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--schedules", type=int, default=10, help="every-second schedules firing during a run")
    parser.add_argument("--keep", action="store_true", help="keep (and reuse) the filled schema bench_history_<rows>")
    args = parser.parse_args()
    results = [measure(n, args.seconds, args.repeat, args.keep, args.schedules) for n in args.rows]
    print("\n| ledger rows | fires per run | lag p50 ms | lag p99 ms (median, min-max) | max ms | sent_at p99 ms |"
          "\n|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['rows']:,} | {r['fires']} | {r['p50_ms']} | {r['p99_ms']} ({r['p99_min_ms']}-{r['p99_max_ms']})"
              f" | {r['max_ms']} | {r['sent_at_p99_ms']} |")
    for r in results:
        print(f"\nloop statements at {r['rows']:,} rows:")
        for p in r["loop_statements"]:
            print(f"  {p['statement']}: {p['ms']} ms, {p['plan']}; {', '.join(p['scans'])}")
    return results


if __name__ == "__main__":
    main()
