"""Randomized differential: Cron.next_after against the brute-force Debian oracle.

Every zone of zoneinfo.available_timezones() whose UTC offset changes between
2025 and 2035 takes part.  For each seed, every such zone contributes a few
transitions; around each, expressions whose hours sit near the transition are
asked for their next fire after random instants, and the engine must give the
oracle's answer whenever the oracle's two-day window holds one.  Seeds are
printed; set RUNLEDGER_ORACLE_SEED to add one.  Each seed's zones are taken in
CHUNKS parts (every CHUNKS-th zone), each zone with a generator of its own, so
the parts run side by side in parallel test processes.
"""

from __future__ import annotations

import json
import os
import random
import time
from datetime import datetime, timedelta, timezone
from functools import cache, lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo, available_timezones

import pytest

from runledger_beat.timing.cron import Cron

from ..support import debian_oracle as oracle
from ..support.shared import once, shared

UTC = timezone.utc
FIRST_YEAR, LAST_YEAR = 2025, 2035
SEEDS = [20250, 20351] + ([int(os.environ["RUNLEDGER_ORACLE_SEED"])] if os.environ.get("RUNLEDGER_ORACLE_SEED") else [])
TRANSITIONS_PER_ZONE = 2  # sampled per seed from the zone's 2025-2035 transitions
EXPRESSIONS_PER_TRANSITION = 8
INSTANTS_PER_EXPRESSION = 13
MIN_CASES_PER_SEED = 25_000  # two fixed seeds: at least 50,000 compared cases per run
CHUNKS = 4
HALF_WINDOW = timedelta(days=1)


def _offset(tz: ZoneInfo, t: datetime) -> timedelta | None:
    """UTC offset of `tz` at `t`."""
    return t.astimezone(tz).utcoffset()


def _bisect(tz: ZoneInfo, lo: datetime, hi: datetime) -> datetime:
    """The first minute in (lo, hi] with the offset of `hi` (offsets differ at lo and hi)."""
    before = _offset(tz, lo)
    while hi - lo > timedelta(minutes=1):
        mid = lo + (hi - lo) // 2
        mid -= timedelta(seconds=mid.second, microseconds=mid.microsecond)
        if mid == lo:
            break
        if _offset(tz, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


@cache
def zone_transitions(name: str) -> tuple[datetime, ...]:
    """Offset changes of a zone in 2025-2035 (12-hourly probe, bisected to the minute)."""
    tz = ZoneInfo(name)
    t, step = datetime(FIRST_YEAR, 1, 1, tzinfo=UTC), timedelta(hours=12)
    stop = datetime(LAST_YEAR + 1, 1, 1, tzinfo=UTC)
    found, previous = [], _offset(tz, t)
    while t < stop:
        offset = _offset(tz, t + step)
        if offset != previous:
            found.append(_bisect(tz, t, t + step))
            previous = offset
        t += step
    return tuple(found)


def _find_dst_zones(folder: Path) -> None:
    """Zones with any offset change 2025-2035, with their transitions, into ``folder/zones.json`` (monthly samples
    pick candidates, probing confirms)."""
    found = {}
    for name in sorted(available_timezones()):
        tz = ZoneInfo(name)
        years = range(FIRST_YEAR, LAST_YEAR + 1)
        samples = {_offset(tz, datetime(y, m, 15, tzinfo=UTC)) for y in years for m in range(1, 13)}
        if len(samples) > 1 and zone_transitions(name):
            found[name] = [t.isoformat() for t in zone_transitions(name)]
    (folder / "zones.json").write_text(json.dumps(found))


@lru_cache(maxsize=1)
def _dst_table() -> dict[str, tuple[datetime, ...]]:
    """The zones with changes and their transitions, found once per run (the test processes share it)."""
    folder = once(shared(), f"dst-zones-{FIRST_YEAR}-{LAST_YEAR}", _find_dst_zones)
    table = json.loads((folder / "zones.json").read_text())
    return {name: tuple(datetime.fromisoformat(t) for t in times) for name, times in table.items()}


def dst_zones() -> tuple[str, ...]:
    """Zones with any offset change 2025-2035."""
    return tuple(_dst_table())


def _near(rng: random.Random, values: list[int], low: int, high: int) -> int:
    """One of `values` nudged by -1..+1 now and then, kept in range."""
    value = rng.choice(values) + (rng.choice((-1, 0, 1)) if rng.random() < 0.3 else 0)
    return min(high, max(low, value))


def minute_field(rng: random.Random, near: list[int]) -> str:
    """A minute field biased to the minutes around the transition."""
    r = rng.random()
    if r < 0.25:
        return "*"
    if r < 0.4:
        return f"*/{rng.choice((2, 5, 7, 10, 15, 20, 30))}"
    if r < 0.7:
        return str(_near(rng, near + [0, 15, 30, 45], 0, 59))
    if r < 0.85:
        a = _near(rng, near, 0, 59)
        return f"{a}-{min(59, a + rng.randint(1, 40))}" + (f"/{rng.randint(2, 9)}" if rng.random() < 0.4 else "")
    return ",".join(str(v) for v in sorted({_near(rng, near, 0, 59), rng.randint(0, 59), rng.randint(0, 59)}))


def hour_field(rng: random.Random, near: list[int]) -> str:
    """An hour field biased to the wall hours on both sides of the transition."""
    r = rng.random()
    if r < 0.15:
        return "*"
    if r < 0.25:
        return f"*/{rng.choice((2, 3, 4))}"
    if r < 0.7:
        return str(_near(rng, near, 0, 23))
    if r < 0.85:
        a = _near(rng, near, 0, 23)
        return f"{a}-{min(23, a + rng.randint(1, 3))}"
    return ",".join(str(v) for v in sorted({_near(rng, near, 0, 23) for _ in range(3)}))


def day_fields(rng: random.Random, day: datetime) -> tuple[str, str, str]:
    """(day-of-month, month, day-of-week): mostly open, sometimes pinned to the local transition day."""
    weekday = (day.weekday() + 1) % 7
    nth = (day.day - 1) // 7 + 1
    r = rng.random()
    if r < 0.55:
        return "*", "*", "*"
    if r < 0.65:
        return str(day.day), str(day.month), "*"
    if r < 0.75:
        return "*", "*", str(rng.choice((weekday, (weekday + 1) % 7, (weekday + 6) % 7)))
    if r < 0.82:
        return "*", "*", f"{weekday}#{nth}"
    if r < 0.88:
        return "*", "*", f"{weekday}L"
    if r < 0.93:
        return rng.choice(("L", "LW", f"{day.day}W", f"{max(1, day.day - 1)}W")), "*", "*"
    return str(rng.randint(1, 28)), "*", str(weekday)  # both restricted: OR


def _local_neighbours(tz: ZoneInfo, transition: datetime) -> tuple[list[int], list[int], datetime]:
    """Wall hours and minutes just before and at the transition, and the local day after it."""
    before = (transition - timedelta(minutes=1)).astimezone(tz)
    after = transition.astimezone(tz)
    hours = sorted({before.hour, after.hour, (before.hour + 1) % 24, (after.hour + 23) % 24})
    minutes = sorted({before.minute, after.minute, (before.minute + 1) % 60})
    return hours, minutes, after.replace(tzinfo=None)


def expression(rng: random.Random, tz: ZoneInfo, transition: datetime) -> str:
    """A 5-field expression likely to fire within hours of the transition."""
    hours, minutes, day = _local_neighbours(tz, transition)
    dom, month, dow = day_fields(rng, day if rng.random() < 0.5 else day - timedelta(days=1))
    return f"{minute_field(rng, minutes)} {hour_field(rng, hours)} {dom} {month} {dow}"


def instants(rng: random.Random, transition: datetime, fire_list: list[datetime], count: int) -> list[datetime]:
    """Random `after` instants within 16 h of the transition; some exactly on a fire or just before one."""
    out = []
    for _ in range(count):
        if fire_list and rng.random() < 0.4:
            fire = rng.choice(fire_list)
            out.append(fire - timedelta(seconds=rng.choice((0, 0, 1, 59, 60))))
        else:
            out.append(transition + timedelta(seconds=rng.randint(-16 * 3600, 16 * 3600)))
    return out


def run_seed(seed: int, zones: tuple[str, ...]) -> tuple[int, int, list[str]]:
    """Compare engine and oracle for one seed in ``zones``: (compared cases, skipped cases, mismatch descriptions)."""
    compared, skipped, mismatches = 0, 0, []
    for name in zones:
        rng = random.Random(f"{seed}:{name}")
        tz = ZoneInfo(name)
        found = _dst_table()[name]
        for transition in rng.sample(found, min(TRANSITIONS_PER_ZONE, len(found))):
            line = oracle.timeline(name, transition - HALF_WINDOW, transition + HALF_WINDOW)
            for _ in range(EXPRESSIONS_PER_TRANSITION):
                expr = expression(rng, tz, transition)
                fire_list = oracle.fires(oracle.parse(expr), line)
                cron = Cron(expr, name)
                for after in instants(rng, transition, fire_list, INSTANTS_PER_EXPRESSION):
                    expected = oracle.next_fire(fire_list, after)
                    if expected is None:
                        skipped += 1
                        continue
                    compared += 1
                    got = cron.next_after(after)
                    if got != expected:
                        mismatches.append(f"seed {seed}: {expr!r} in {name} after {after.isoformat()}: "
                                          f"engine {got}, Debian {expected}")
    return compared, skipped, mismatches


@pytest.mark.parametrize("chunk", range(CHUNKS))
@pytest.mark.parametrize("seed", SEEDS)
def test_engine_matches_debian_oracle(seed: int, chunk: int) -> None:
    began = time.perf_counter()
    zones = dst_zones()[chunk::CHUNKS]
    compared, skipped, mismatches = run_seed(seed, zones)
    print(f"oracle seed {seed}, part {chunk + 1} of {CHUNKS}: {compared} cases compared, {skipped} beyond the "
          f"window, {len(zones)} zones, {time.perf_counter() - began:.1f} s")
    assert not mismatches, f"{len(mismatches)} mismatches (seed {seed}):\n" + "\n".join(mismatches[:20])
    assert compared >= MIN_CASES_PER_SEED // CHUNKS, f"seed {seed} part {chunk}: only {compared} cases compared"


SECONDS_ZONES = ["America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago", "America/Havana"]
SECONDS_EXPRESSIONS = ["*/20 * * * * *", "30 */7 * * * *", "0 0 * * * *", "15 45 * * * *", "*/10 0-5,30-35 * * * *",
                       "0 * 1-3 * * *", "5 10 0-1,23 * * *"]


@pytest.mark.parametrize("zone_name", SECONDS_ZONES)
def test_six_field_expressions_follow_real_seconds(zone_name: str) -> None:
    """6-field jobs are wildcard jobs at one-second resolution (see the oracle's docstring)."""
    rng = random.Random(zone_name)
    for transition in zone_transitions(zone_name)[:4]:
        line = oracle.timeline(zone_name, transition - timedelta(hours=2), transition + timedelta(hours=2), step=1)
        for expr in SECONDS_EXPRESSIONS:
            fire_list = oracle.fires(oracle.parse(expr), line)
            cron = Cron(expr, zone_name)
            for _ in range(40):
                after = transition + timedelta(seconds=rng.randint(-6600, 6600), microseconds=rng.randint(0, 999_999))
                expected = oracle.next_fire(fire_list, after)
                if expected is not None:
                    assert cron.next_after(after) == expected, (expr, zone_name, after)
