"""History: does beat's cost stay flat as the ledger grows? Lag of every-second fires beside N finished rows.

Fills a fresh schema's ledger with N finished rows (INSERT ... SELECT
generate_series, spread over the past 30 days, a few hundred schedules), then
runs one real `celery beat -S runledger` with 100 every-second schedules for
--seconds and reports the ledger's send lag (sent_at - scheduled_for: after the
broker's confirm) as p50 / p99 / max. Also EXPLAIN ANALYZE of each periodic
statement of beat's loop, with its plan's top node, to show none scans history.
Run with --rows 0 for the same-run baseline.

    .venv/bin/python bench/bench_history.py --rows 0 5000000 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    DSN,
    celery_env,
    connect,
    declare_queue,
    delete_queue,
    drop_schema,
    emit,
    fresh_schema,
    start,
    stop,
    token,
)
from runledger_beat import queries  # noqa: E402

#: The statements beat runs between instants, with the parameters it passes.
LOOP = {
    "claim_due_schedules": {"limit": 1000, "lookahead": 2.0, "group_start": None, "group_window": 0.05},
    "next_due_in": {"lookahead": 2.0},
    "claim_pending_jobs": {"grace": 30.0, "limit": 1000},
    "mark_lost_runs": {"default_bound": 3600.0},
    "resolve_stale_sent": {"lost_after": 3600.0},
    "unresolved_sent_without_hook": {"older_than": 600.0},
}

FILL = """
INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,
                  created_at, sent_at, started_at, finished_at, dispatch_attempts, worker)
SELECT gen_random_uuid(), NULL, 'old-' || (g %% 500), now() - interval '30 days' * (g::float8 / %(n)s),
       'bench.noop', '{"args": [], "kwargs": {}}', 'scheduled',
       CASE WHEN g %% 50 = 0 THEN 'failure' ELSE 'success' END,
       now() - interval '30 days' * (g::float8 / %(n)s), now() - interval '30 days' * (g::float8 / %(n)s),
       now() - interval '30 days' * (g::float8 / %(n)s), now() - interval '30 days' * (g::float8 / %(n)s),
       1, 'w1'
  FROM generate_series(1, %(n)s) AS g
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


def run(rows: int, seconds: int, schedules: int = 100) -> dict:
    """One measurement with ``rows`` historic ledger rows."""
    schema, queue = fresh_schema(), f"benchq_{token()}"
    declare_queue(queue)
    log = Path(tempfile.mkstemp(prefix="bench-history-", suffix=".log")[1])
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            began = time.monotonic()
            if rows:
                # The day partitions a beat running through those 30 days would have made.
                db.execute("SELECT count(*) FROM runledger_maintain_ledger(NULL, 38, now() - interval '31 days')")
                db.execute(FILL, {"n": rows})
                db.execute("VACUUM ANALYZE jobs")  # a partitioned table: every partition
                db.execute("CHECKPOINT")  # the fill's dirty pages written now, not during the measurement
            filled = time.monotonic() - began
            plans = [explain(db, name, params) for name, params in LOOP.items()]
            start_at = db.execute("SELECT date_trunc('second', now()) + interval '5 seconds' AS t").fetchone()["t"]
            for i in range(schedules):
                db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                           " VALUES (%s, %s, 'bench.noop', '* * * * * *', %s)", (uuid.uuid4(), f"s{i}", start_at))
            env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue, BENCH_EXTRA=json.dumps({}))
            argv = [sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                    "--loglevel", "WARNING", "--pidfile="]
            procs = [start(argv, env, log)]
            time.sleep(5 + seconds + 2)
            lags = [r["lag"] for r in db.execute(
                "SELECT extract(epoch FROM sent_at - scheduled_for)::float8 AS lag FROM jobs"
                " WHERE schedule_name LIKE 's%%' AND scheduled_for >= %s AND sent_at IS NOT NULL"
                " ORDER BY 1", (start_at,)).fetchall()]
        if not lags:
            raise RuntimeError(f"no fires; beat log: {log.read_text(errors='replace')[-2000:]}")
        return emit({"bench": "history", "rows": rows, "fill_s": round(filled, 1), "fires": len(lags),
                     "p50_ms": round(statistics.median(lags) * 1000, 1),
                     "p99_ms": round(lags[max(0, int(len(lags) * 0.99) - 1)] * 1000, 1),
                     "max_ms": round(lags[-1] * 1000, 1), "loop_statements": plans})
    finally:
        stop(procs)
        log.unlink(missing_ok=True)
        delete_queue(queue)
        drop_schema(schema)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[0, 5_000_000])
    parser.add_argument("--seconds", type=int, default=60)
    args = parser.parse_args()
    return [run(n, args.seconds) for n in args.rows]


if __name__ == "__main__":
    main()
