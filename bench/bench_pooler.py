"""Two beats and a worker (ledger hook on) through PgBouncer in transaction mode, against the same run direct.

Each run: ``--every`` every-second schedules for ``--seconds`` s plus one ``--burst``-fire instant half way,
two beats, one worker (prefork, 2 processes). "direct" connects to Postgres; "pgbouncer" goes through a
PgBouncer of its own (pool_mode = transaction, default_pool_size = 4) with ``runledger_pool_mode =
"transaction"`` (no prepared statements, no LISTEN: beats poll every second). Read from the ledger afterwards:
slots due, slots recorded once, rows recorded twice (impossible: a unique constraint), runs the hook saw
started (``success``) and duplicate deliveries, lag = sent_at (else started_at) - scheduled_for per group.
The two modes alternate ``--repeat`` times; the figures are medians with min-max, and the pooled p99 as a ratio
to the direct p99 of the same run.

    flock /tmp/runledger-heavy.lock .venv/bin/python bench/bench_pooler.py --seconds 40 --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    AMQP,
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
from tests.support.pooler import PgBouncer  # noqa: E402

LEAD = 8  # seconds from the schedules' insert to their first fire (beats and worker start meanwhile)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _celery(role: str, env: dict[str, str], log: Path) -> object:
    argv = [sys.executable, "-m", "celery", "-A", "bench.benchapp", role, "--loglevel", "WARNING"]
    if role == "beat":
        argv += ["-S", "runledger", "--pidfile="]
    else:
        argv += ["-c", "2", "-P", "prefork", "-Q", env["BENCH_QUEUE"], "--without-gossip", "--without-mingle",
                 "--without-heartbeat", "-n", f"benchpool-{token()}@%h"]
    return start(argv, env, log)


def run(mode: str, seconds: int, every: int, burst: int) -> dict:
    """One run in ``mode`` ("direct" or "pgbouncer"); its figures."""
    schema, queue = fresh_schema(), f"benchq_{token()}"
    declare_queue(queue)
    pooler = PgBouncer(DSN, pool_mode="transaction", pool_size=4) if mode == "pgbouncer" else None
    logs = [Path(tempfile.mkstemp(prefix=f"bench-pooler-{mode}-", suffix=".log")[1]) for _ in range(3)]
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            first = db.execute("SELECT date_trunc('second', now()) + make_interval(secs => %s) AS t",
                               (LEAD,)).fetchone()["t"]
            burst_at = first + timedelta(seconds=seconds // 2)
            with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at)"
                                  " FROM STDIN") as copy:
                for i in range(every):
                    copy.write_row((uuid.uuid4(), f"each-{i}", "bench.noop", "cron", "* * * * * *", first))
                for i in range(burst):
                    copy.write_row((uuid.uuid4(), f"burst-{i}", "bench.noop", "cron", f"{burst_at.second} * * * * *",
                                    burst_at))
        extra = '{"runledger_pool_mode": "transaction"}' if pooler else "{}"
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=queue, BENCH_HOOK="1", BENCH_EXTRA=extra,
                         BENCH_DSN=pooler.dsn_through(DSN) if pooler else DSN)
        procs = [_celery("beat", env, logs[0]), _celery("beat", env, logs[1]), _celery("worker", env, logs[2])]
        end = first + timedelta(seconds=seconds)
        with connect(DSN, schema, autocommit=True) as db:
            while db.execute("SELECT now() < %s + interval '5 seconds' AS wait", (end,)).fetchone()["wait"]:
                time.sleep(0.5)
            rows = db.execute(
                "SELECT schedule_name LIKE 'burst-%%' AS burst, scheduled_for, status, duplicates,"
                " extract(epoch FROM coalesce(sent_at, started_at) - scheduled_for)::float8 AS lag"
                " FROM jobs WHERE scheduled_for >= %s AND scheduled_for < %s", (first, end)).fetchall()
            slots = db.execute("SELECT count(DISTINCT (schedule_id, scheduled_for)) AS n FROM jobs"
                               " WHERE scheduled_for >= %s AND scheduled_for < %s", (first, end)).fetchone()["n"]
        due = every * seconds + burst
        if not rows:
            raise RuntimeError("no fires recorded; logs:\n" + "\n".join(log.read_text(errors="replace")[-2000:]
                                                                          for log in logs))
        result = {"bench": "pooler", "mode": mode, "seconds": seconds, "slots_due": due, "slots_recorded": slots,
                  "rows_twice": len(rows) - slots, "succeeded": sum(r["status"] == "success" for r in rows),
                  "duplicate_deliveries": sum(r["duplicates"] for r in rows)}
        for label, group in (("every_second", [r for r in rows if not r["burst"]]),
                             ("instant", [r for r in rows if r["burst"]])):
            ms = [1000 * r["lag"] for r in group if r["lag"] is not None]
            result[f"{label}_unsent"] = len(group) - len(ms)
            if ms:
                result.update({f"{label}_p50_ms": round(statistics.median(ms), 1),
                               f"{label}_p99_ms": round(_percentile(ms, 0.99), 1),
                               f"{label}_max_ms": round(max(ms), 1)})
        return emit(result)
    finally:
        stop(procs)
        for log in logs:
            log.unlink(missing_ok=True)
        if pooler is not None:
            pooler.close()
        delete_queue(queue)
        drop_schema(schema)


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="every-second schedules")
    parser.add_argument("--burst", type=int, default=500, help="fires of the one big instant")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"direct": [], "pgbouncer": []}
    for _ in range(args.repeat):
        for mode in runs:
            runs[mode].append(run(mode, args.seconds, args.every, args.burst))
    summary = {"bench": "pooler-summary", "amqp": AMQP.split("@")[-1], "repeat": args.repeat,
               "seconds": args.seconds, "every": args.every, "burst": args.burst}
    for mode, results in runs.items():
        summary[f"{mode}_slots_missing_or_twice"] = sum(abs(r["slots_due"] - r["slots_recorded"]) + r["rows_twice"]
                                                        for r in results)
        for key in ("every_second_p99_ms", "instant_p99_ms"):
            summary[f"{mode}_{key}"] = _spread([r.get(key, float("nan")) for r in results])
    for key in ("every_second_p99_ms", "instant_p99_ms"):
        ratios = [p.get(key, float("nan")) / d[key] for p, d in zip(runs["pgbouncer"], runs["direct"], strict=True)
                  if d.get(key)]
        summary[f"{key}_pgbouncer_over_direct"] = _spread(ratios) if ratios else None
    return emit(summary)


if __name__ == "__main__":
    main()
