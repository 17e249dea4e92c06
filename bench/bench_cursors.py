"""Cursor moves: beat's runledger_advance_cursors() against the plain UPDATE it replaces, alternated.

N schedules are moved in batches of runledger_batch_size (1000), as a burst's preparation does, in a
transaction that is rolled back, so every round starts from the same table. Each road has its own
connection (beat keeps one claims connection for its life). Reported per round as the function's time
over the UPDATE's in the same round (wall clock, and the server backend's CPU time, which a busy machine
disturbs less), then the median and min-max of those ratios.

    .venv/bin/python bench/bench_cursors.py --n 10000 --rounds 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402

from bench.common import DSN, connect, drop_schema, emit, fresh_schema  # noqa: E402
from runledger_beat.db.beat_store import BeatStore as Store  # noqa: E402

BATCH = 1000
#: Rounds left out at the start (caches, the plan cache).
WARM = 3


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (the connection's server backend on this host)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _move(conn: psycopg.Connection, by_function: bool, ids: list, when: datetime) -> tuple[float, float]:
    """Every cursor moved once, batch by batch, rolled back: (wall seconds, backend CPU seconds)."""
    store = Store(conn, cursor_function=by_function)
    pid = conn.info.backend_pid
    with conn.transaction(force_rollback=True):
        store.mark_internal()
        started, cpu = time.perf_counter(), _cpu_seconds(pid)
        for k in range(0, len(ids), BATCH):
            chunk = ids[k:k + BATCH]
            assert store.advance_cursors(chunk, [when] * len(chunk), [True] * len(chunk)) == len(chunk)
        return time.perf_counter() - started, _cpu_seconds(pid) - cpu


def cursors(n: int, rounds: int) -> dict:
    schema = fresh_schema()
    try:
        with connect(DSN, schema, autocommit=True) as db:
            db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                       " SELECT gen_random_uuid(), 's' || g, 'bench.noop', '* * * * *', now()"
                       " FROM generate_series(1, %s) g", (n,))
            ids = [r["id"] for r in db.execute("SELECT id FROM job_schedules ORDER BY random()").fetchall()]
            db.execute("VACUUM ANALYZE job_schedules")
        when = datetime.now(timezone.utc) + timedelta(minutes=1)
        wall, cpu = [], []
        with connect(DSN, schema) as plain, connect(DSN, schema) as definer:
            for round_ in range(rounds + WARM):
                update = _move(plain, False, ids, when)
                function = _move(definer, True, ids, when)
                if round_ >= WARM:
                    wall.append(function[0] / update[0])
                    if update[1] > 0:
                        cpu.append(function[1] / update[1])
        return emit({"bench": "cursors", "n": n, "batch": BATCH, "rounds": rounds,
                     "wall_ratio_median": round(statistics.median(wall), 3),
                     "wall_ratio_min": round(min(wall), 3), "wall_ratio_max": round(max(wall), 3),
                     "cpu_ratio_median": round(statistics.median(cpu), 3) if cpu else None,
                     "cpu_ratio_min": round(min(cpu), 3) if cpu else None,
                     "cpu_ratio_max": round(max(cpu), 3) if cpu else None})
    finally:
        drop_schema(schema)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="schedules moved per round (default 10000)")
    parser.add_argument("--rounds", type=int, default=30, help="rounds measured (default 30)")
    args = parser.parse_args()
    return cursors(args.n, args.rounds)


if __name__ == "__main__":
    main()
