"""Benchmark the time engine: next-fire computations per second on one core.

(a) one `*/5 * * * *` Europe/Paris schedule with jitter 30, advance() on
    successive cursors; (b) 10,000 schedules (random ids) sharing five
    expressions in a mix of zones, each computing its next fire.
Prints a JSON object and a one-line summary.  Run: .venv/bin/python bench/bench_timeengine.py
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import datetime, timedelta, timezone

from runledger_beat.timeengine import Timing, advance, compile_cron, next_fire_after

UTC = timezone.utc
START = datetime(2026, 1, 1, tzinfo=UTC)


def bench_successive(steps: int = 100_000) -> float:
    """advance() along one schedule's cursor; returns computations per second."""
    timing = Timing("cron", cron="*/5 * * * *", timezone="Europe/Paris", max_jitter=30).validate()
    schedule_id = uuid.UUID("018fa1f8-0000-7000-8000-000000000123")
    cursor = next_fire_after(timing, START, schedule_id)
    began = time.perf_counter()
    for _ in range(steps):
        assert cursor is not None
        cursor = advance(timing, cursor, cursor, schedule_id).next_fire_at
    return steps / (time.perf_counter() - began)


def bench_many(schedules: int = 10_000, rounds: int = 5) -> float:
    """Each of `schedules` computes its next fire after a shared `now`; returns per second."""
    rng = random.Random(42)
    forms = [
        ("*/5 * * * *", "Europe/Paris"),
        ("0 * * * *", "UTC"),
        ("30 2 * * *", "America/New_York"),
        ("*/15 9-17 * * MON-FRI", "Asia/Kathmandu"),
        ("0 0 1 * *", "Australia/Lord_Howe"),
    ]
    timings = [
        Timing("cron", cron=expr, timezone=tz, max_jitter=rng.choice([0, 30, 300])).validate()
        for expr, tz in forms
    ]
    rows = [(timings[i % len(timings)], uuid.UUID(int=rng.getrandbits(128))) for i in range(schedules)]
    compile_cron.cache_clear()
    began = time.perf_counter()
    now = START
    for _ in range(rounds):
        for timing, schedule_id in rows:
            next_fire_after(timing, now, schedule_id)
        now += timedelta(seconds=17)
    return schedules * rounds / (time.perf_counter() - began)


def main() -> None:
    """Run both benchmarks and print the figures."""
    figures = {
        "successive_paris_jitter30_per_s": round(bench_successive()),
        "shared_10000_schedules_per_s": round(bench_many()),
    }
    print(json.dumps(figures))
    print(
        f"time engine: {figures['successive_paris_jitter30_per_s']:,} advance()/s on one Paris */5 cursor; "
        f"{figures['shared_10000_schedules_per_s']:,} next fires/s across 10,000 schedules"
    )


if __name__ == "__main__":
    main()
