"""Ledger lifecycle: dropping a day of ledger, against deleting the same rows; migrating a populated ledger.

drop: a day partition holding --day-rows finished fires is dropped by runledger_maintain_ledger
(retention) and timed; the baseline, in the same round, is what an unpartitioned ledger must do
instead: DELETE of the same number of rows (same columns and indexes) from a plain table.

loop: beat's first step (FirePipeline.run_once, which makes partitions ahead and starts the retention
drops) beside a day of --loop-rows rows past the retention: the step's time against the time until the
day is gone, to show the loop does not wait while the filesystem frees the day's files.

migrate: a schema at migration 5 with --migrate-rows finished fires is migrated to partitions while a
writer inserts a ledger row every 5 ms; reported are the migration's wall time and the writer's
longest wait (the lock anyone felt), so the ratio shows how much of the migration blocked writes.

    .venv/bin/python bench/bench_ledger.py --rounds 5 --day-rows 500000 --migrate-rows 2000000
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from celery import Celery  # noqa: E402

from bench.common import AMQP, DSN, connect, drop_schema, emit, fresh_schema, token  # noqa: E402
from runledger_beat.beat.pipeline import FirePipeline  # noqa: E402
from runledger_beat.db import migrate  # noqa: E402
from runledger_beat.settings import load  # noqa: E402

FILL_DAY = """
INSERT INTO {table} (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,
                     created_at, sent_at, started_at, finished_at, dispatch_attempts, worker)
SELECT gen_random_uuid(), NULL, 'old-' || (g %% 500), %(day)s + interval '1 day' * (g::float8 / (%(n)s + 1)),
       'bench.noop', '{{"args": [], "kwargs": {{}}}}', 'scheduled', 'success',
       %(day)s, %(day)s, %(day)s, %(day)s, 1, 'w1'
  FROM generate_series(1, %(n)s) AS g
"""


def _old_day(db, rows: int) -> tuple:
    """Day partitions 41 to 33 days ago, the oldest (the only one past a 40-day retention) filled with
    ``rows`` finished fires: (its first instant, its name)."""
    db.execute("SELECT count(*) FROM runledger_maintain_ledger_as_of(NULL, 7, now() - interval '40 days')")
    day = db.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
                     " - interval '41 days' AS d").fetchone()["d"]
    db.execute(FILL_DAY.format(table="jobs"), {"day": day, "n": rows})
    name = db.execute("SELECT 'jobs_p' || to_char(%s AT TIME ZONE 'UTC', 'YYYYMMDD') AS n", (day,)).fetchone()["n"]
    return day, name


def drop_round(rows: int) -> dict:
    """Drop one day partition of ``rows`` rows; delete as many rows from a plain table (the baseline)."""
    schema = fresh_schema()
    try:
        with connect(DSN, schema, autocommit=True) as db:
            day, _ = _old_day(db, rows)
            db.execute("CREATE TABLE plain (LIKE jobs INCLUDING DEFAULTS)")
            for index in ("(schedule_id, scheduled_for)", "(created_at)", "(schedule_id, created_at DESC)", "(id)"):
                db.execute(f"CREATE INDEX ON plain {index}")
            db.execute(FILL_DAY.format(table="plain"), {"day": day, "n": rows})
            db.execute("VACUUM ANALYZE jobs")
            db.execute("VACUUM ANALYZE plain")
            db.execute("CHECKPOINT")
            began = time.perf_counter()
            done = db.execute("SELECT * FROM runledger_maintain_ledger(interval '40 days')").fetchall()
            dropped_ms = (time.perf_counter() - began) * 1000
            assert [r["action"] for r in done] == ["dropped"], done
            began = time.perf_counter()
            deleted = db.execute("DELETE FROM plain WHERE scheduled_for < %s + interval '1 day'", (day,)).rowcount
            delete_ms = (time.perf_counter() - began) * 1000
            assert deleted == rows
        return {"drop_ms": dropped_ms, "delete_ms": delete_ms}
    finally:
        drop_schema(schema)


def loop_round(rows: int) -> dict:
    """Beat's first step (``FirePipeline.run_once``) beside a day of ``rows`` rows past the retention: how long
    the loop is away, and how long until the day is gone (its drop runs in the background, retention.py)."""
    schema = fresh_schema()
    try:
        with connect(DSN, schema, autocommit=True) as db:
            _, old = _old_day(db, rows)
            db.execute("VACUUM ANALYZE jobs")
            db.execute("CHECKPOINT")
        app = Celery(f"bench_ledger_{token()}", broker=AMQP)
        app.conf.update(runledger_dsn=DSN, runledger_schema=schema, runledger_listen=False,
                        runledger_retention=timedelta(days=40))
        pipeline = FirePipeline(app, load(app.conf))
        try:
            began = time.perf_counter()
            pipeline.run_once()
            step = time.perf_counter() - began
            pipeline.housekeeping.wait_for_retention()
            gone = time.perf_counter() - began
        finally:
            pipeline.close()
        with connect(DSN, schema, autocommit=True) as db:
            assert db.execute("SELECT to_regclass(%s) AS r", (old,)).fetchone()["r"] is None, f"{old} not dropped"
        return {"step_ms": step * 1000, "gone_ms": gone * 1000}
    finally:
        drop_schema(schema)


def migrate_round(rows: int) -> dict:
    """Migrate a populated ledger with a writer going; the writer's longest wait and the migration's time."""
    schema = f"bench_{token()}"
    with connect(DSN, "public", autocommit=True) as conn:
        migrate(conn, schema, until=5)
    try:
        with connect(DSN, schema, autocommit=True) as db:
            day = db.execute("SELECT now() - interval '30 days' AS d").fetchone()["d"]
            db.execute(FILL_DAY.format(table="jobs"), {"day": day, "n": rows})
            db.execute("VACUUM ANALYZE jobs")
            db.execute("CHECKPOINT")
        stop, waits = threading.Event(), []

        def writer() -> None:
            with connect(DSN, schema, autocommit=True) as conn:
                while not stop.is_set():
                    began = time.perf_counter()
                    conn.execute("INSERT INTO jobs (id, scheduled_for, job_type, payload, stage, status)"
                                 " VALUES (gen_random_uuid(), now(), 'x', '{}', 'manual', 'pending')")
                    waits.append(time.perf_counter() - began)
                    time.sleep(0.005)

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            time.sleep(0.2)
            with connect(DSN, "public", autocommit=True) as conn:
                began = time.perf_counter()
                migrate(conn, schema)
                took = time.perf_counter() - began
        finally:
            stop.set()
            thread.join()
        return {"migrate_s": took, "longest_write_wait_ms": max(waits) * 1000,
                "median_write_ms": statistics.median(waits) * 1000}
    finally:
        drop_schema(schema)


def _spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2), "max": round(max(values), 2)}


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--day-rows", type=int, default=500_000)
    parser.add_argument("--migrate-rows", type=int, default=2_000_000)
    parser.add_argument("--loop-rows", type=int, default=1_000_000,
                        help="rows of the day dropped beside beat's first step (0: skip)")
    args = parser.parse_args()
    drops = [drop_round(args.day_rows) for _ in range(args.rounds)]
    result = {"bench": "ledger", "rounds": args.rounds, "day_rows": args.day_rows,
              "drop_day_ms": _spread([d["drop_ms"] for d in drops]),
              "delete_same_rows_ms": _spread([d["delete_ms"] for d in drops]),
              "drop_over_delete": _spread([d["drop_ms"] / d["delete_ms"] for d in drops])}
    if args.loop_rows:
        loops = [loop_round(args.loop_rows) for _ in range(max(1, args.rounds // 2))]
        result.update({"loop_rows": args.loop_rows,
                       "loop_step_ms": _spread([r["step_ms"] for r in loops]),
                       "day_gone_ms": _spread([r["gone_ms"] for r in loops]),
                       "step_over_gone": _spread([r["step_ms"] / r["gone_ms"] for r in loops])})
    if args.migrate_rows:
        migrations = [migrate_round(args.migrate_rows) for _ in range(max(1, args.rounds // 2))]
        result.update({"migrate_rows": args.migrate_rows,
                       "migrate_s": _spread([m["migrate_s"] for m in migrations]),
                       "longest_write_wait_ms": _spread([m["longest_write_wait_ms"] for m in migrations]),
                       "longest_wait_over_migration": _spread([m["longest_write_wait_ms"] / 1000 / m["migrate_s"]
                                                               for m in migrations])})
    return emit(result)


if __name__ == "__main__":
    main()
