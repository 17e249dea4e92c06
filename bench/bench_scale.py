"""Scale: a beat's memory and idle CPU with 100 and with 100,000 schedules in the table, none due.

Each run starts one `celery beat -S runledger`, lets it settle, then reads its
RSS and the CPU time it used over a quiet window (cursors are a day away).

    .venv/bin/python bench/bench_scale.py --n 100 100000 --window 30
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (  # noqa: E402
    DSN,
    celery_env,
    connect,
    cpu_seconds,
    drop_schema,
    emit,
    fresh_schema,
    insert_schedules,
    start,
    status_kb,
    stop,
    token,
)

SETTLE = 10.0


def scale(n: int, window: float = 30.0) -> dict:
    schema = fresh_schema()
    log = Path(tempfile.mkstemp(prefix="bench-scale-", suffix=".log")[1])
    procs = []
    try:
        with connect(DSN, schema, autocommit=True) as db:
            later = db.execute("SELECT now() + interval '1 day' AS t").fetchone()["t"]
            insert_schedules(db, n, later)
        env = celery_env(BENCH_SCHEMA=schema, BENCH_QUEUE=f"benchq_{token()}")
        beat = start([sys.executable, "-m", "celery", "-A", "bench.benchapp", "beat", "-S", "runledger",
                      "--loglevel", "WARNING", "--pidfile="], env, log)
        procs.append(beat)
        time.sleep(SETTLE)
        if beat.poll() is not None:
            raise RuntimeError(f"beat exited:\n{log.read_text(errors='replace')[-2000:]}")
        cpu0, wall0 = cpu_seconds(beat.pid), time.monotonic()
        time.sleep(window)
        cpu1, wall1 = cpu_seconds(beat.pid), time.monotonic()
        return emit({"bench": "scale", "schedules": n, "rss_mb": round(status_kb(beat.pid, "VmRSS") / 1024, 1),
                     "idle_cpu_percent": round(100 * (cpu1 - cpu0) / (wall1 - wall0), 3),
                     "window_s": window})
    finally:
        stop(procs)
        log.unlink(missing_ok=True)
        drop_schema(schema)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[100, 100000])
    parser.add_argument("--window", type=float, default=30.0)
    args = parser.parse_args()
    return [scale(n, args.window) for n in args.n]


if __name__ == "__main__":
    main()
