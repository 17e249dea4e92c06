"""Benchmark the time engine: next-fire computations per second on one core.

(a) one `*/5 * * * *` Europe/Paris schedule with jitter 30, advance() on
    successive cursors; (b) 10,000 schedules (random ids) sharing five
    expressions in a mix of zones, each computing its next fire; (c) the five
    expressions asked for the next fire after distinct random instants of
    2026, by the engine (no memo hits) and by cronsim in the same run, as a
    ratio baseline.
Prints a JSON object and a one-line summary.  Run: .venv/bin/python bench/bench_timeengine.py
"""

from __future__ import annotations

import json
import random
import time
import uuid
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from cronsim import CronSim

from runledger_beat.timing.engine import Timing, advance, compile_cron, next_fire_after

UTC = timezone.utc
START = datetime(2026, 1, 1, tzinfo=UTC)
FORMS = [
    ("*/5 * * * *", "Europe/Paris"),
    ("0 * * * *", "UTC"),
    ("30 2 * * *", "America/New_York"),
    ("*/15 9-17 * * MON-FRI", "Asia/Kathmandu"),
    ("0 0 1 * *", "Australia/Lord_Howe"),
]


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
    timings = [
        Timing("cron", cron=expr, timezone=tz, max_jitter=rng.choice([0, 30, 300])).validate()
        for expr, tz in FORMS
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


def _instants(count: int) -> list[datetime]:
    """Distinct random instants of 2026 (fixed seed), so no memo answers for the engine."""
    rng = random.Random(7)
    year = 365 * 86400
    return [START + timedelta(seconds=rng.randrange(year), microseconds=rng.randrange(10**6)) for _ in range(count)]


def bench_distinct_engine(count: int = 20_000) -> float:
    """Engine next fire after distinct instants, the five expressions in turn; returns per second."""
    crons = [compile_cron(expr, tz) for expr, tz in FORMS]
    instants = _instants(count)
    began = time.perf_counter()
    for i, after in enumerate(instants):
        crons[i % len(crons)].next_after(after)
    return count / (time.perf_counter() - began)


def bench_distinct_cronsim(count: int = 20_000) -> float:
    """cronsim on the same questions (a CronSim per question, as it has no next-after call); per second."""
    forms = [(expr, ZoneInfo(tz)) for expr, tz in FORMS]
    instants = _instants(count)
    began = time.perf_counter()
    for i, after in enumerate(instants):
        expr, tz = forms[i % len(forms)]
        next(CronSim(expr, after.astimezone(tz)))
    return count / (time.perf_counter() - began)


def main() -> None:
    """Run the benchmarks and print the figures."""
    engine, cronsim = bench_distinct_engine(), bench_distinct_cronsim()
    figures = {
        "successive_paris_jitter30_per_s": round(bench_successive()),
        "shared_10000_schedules_per_s": round(bench_many()),
        "distinct_instants_engine_per_s": round(engine),
        "distinct_instants_cronsim_per_s": round(cronsim),
        "engine_over_cronsim": round(engine / cronsim, 2),
    }
    print(json.dumps(figures))
    print(
        f"time engine: {figures['successive_paris_jitter30_per_s']:,} advance()/s on one Paris */5 cursor; "
        f"{figures['shared_10000_schedules_per_s']:,} next fires/s across 10,000 schedules; "
        f"distinct instants: engine {figures['distinct_instants_engine_per_s']:,}/s, "
        f"cronsim {figures['distinct_instants_cronsim_per_s']:,}/s ({figures['engine_over_cronsim']}x)"
    )


if __name__ == "__main__":
    main()
