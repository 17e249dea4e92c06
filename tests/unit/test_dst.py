"""DST behaviour: agreement with cronsim (Debian cron rules) around real transitions.

cronsim is a test-only oracle.  Its local aware results are converted to UTC and
compared with Cron.next_after stepped from the previous fire.  Stepped ranges
with equal ends ("21-21/2") are left out of the random set: cronsim reads them
as "21/2" (21, 23), Vixie cron and this engine as just 21.

cronsim steps hours by 3,600 s of real time, so in a zone whose transition is
not on the hour (Lord Howe's 30-minute shift) it drifts off the wall-clock
hours for wildcard jobs (it skips existing matches on both sides of the
shift); those cases are judged by the brute-force Debian oracle in
tests/unit/test_cron_oracle.py instead and skipped here.
"""

from __future__ import annotations

import random
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from cronsim import CronSim

from runledger_beat.timing.cron import Cron

UTC = timezone.utc
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kathmandu"]
YEARS = (2026, 2027)
MAX_FIRES = 120  # per expression and window, keeps dense expressions cheap


def transitions(tz: ZoneInfo, year: int) -> list[datetime]:
    """UTC instants (to the hour) at which the zone's offset changes in `year`."""
    found, t = [], datetime(year, 1, 1, tzinfo=UTC)
    previous = t.astimezone(tz).utcoffset()
    while t.year == year:
        t += timedelta(hours=1)
        offset = t.astimezone(tz).utcoffset()
        if offset != previous:
            found.append(t)
        previous = offset
    return found


def windows(zone_name: str) -> list[datetime]:
    """Centres of the comparison windows: every transition, or fixed dates for a zone without DST."""
    tz = ZoneInfo(zone_name)
    centres = [t for year in YEARS for t in transitions(tz, year)]
    return centres or [datetime(y, m, d, tzinfo=UTC) for y in YEARS for m, d in ((3, 29), (10, 25))]


def random_field(rng: random.Random, low: int, high: int) -> str:
    """A pinned, listed, ranged, stepped or wildcard field."""
    r = rng.random()
    if r < 0.15:
        return "*"
    if r < 0.35:
        return f"*/{rng.randint(2, high // 2 + 1)}"
    if r < 0.5:
        a = rng.randint(low, high)
        return f"{a}-{rng.randint(a, high)}"
    if r < 0.65:
        a = rng.randint(low, high - 1)
        return f"{a}-{rng.randint(a + 1, high)}/{rng.randint(1, 5)}"
    if r < 0.8:
        return ",".join(str(v) for v in sorted(rng.sample(range(low, high + 1), rng.randint(2, 4))))
    return str(rng.randint(low, high))


def random_expressions(seed: int, count: int = 300) -> list[str]:
    """5-field expressions; half pin the hour near the usual transition hours."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        hour = random_field(rng, 0, 23)
        if rng.random() < 0.5:
            hour = rng.choice(["0", "1", "2", "3", "1,2", "2-3", "*/2", "1-3", "0-2/2"])
        out.append(f"{random_field(rng, 0, 59)} {hour} * * *")
    return out


HALF_HOUR_SHIFT_ZONES = {"Australia/Lord_Howe"}


def cronsim_drifts(expr: str, zone_name: str) -> bool:
    """A wildcard job in a zone whose shift is not whole hours (cronsim is off there)."""
    minute, hour = expr.split()[:2]
    return zone_name in HALF_HOUR_SHIFT_ZONES and (minute.startswith("*") or hour.startswith("*"))


def compare(expr: str, zone_name: str, centre: datetime) -> None:
    """Fires from centre - 1 day to centre + 1 day agree with cronsim (where cronsim follows Debian)."""
    if cronsim_drifts(expr, zone_name):
        return
    tz = ZoneInfo(zone_name)
    start, stop = centre - timedelta(days=1), centre + timedelta(days=1)
    oracle = CronSim(expr, start.astimezone(tz))
    cron, cursor = Cron(expr, zone_name), start
    for _ in range(MAX_FIRES):
        expected = next(oracle).astimezone(UTC)
        got = cron.next_after(cursor)
        assert got == expected, f"{expr!r} in {zone_name} after {cursor}"
        if expected > stop:
            break
        cursor = expected


@pytest.mark.parametrize("zone_name", ZONES)
def test_random_expressions_agree_with_cronsim(zone_name: str) -> None:
    centres = windows(zone_name)
    for expr in random_expressions(seed=ZONES.index(zone_name)):
        for centre in centres:
            compare(expr, zone_name, centre)


@pytest.mark.parametrize("zone_name", ZONES)
@pytest.mark.parametrize(
    "expr",
    ["30 1 * * *", "30 2 * * *", "0 0 * * *", "15 2 * * *", "*/30 * * * *", "0 * * * *", "45 */2 * * *", "0 1-3 * * *"],
)
def test_fixed_expressions_agree_with_cronsim(zone_name: str, expr: str) -> None:
    for centre in windows(zone_name):
        compare(expr, zone_name, centre)


@pytest.mark.parametrize("zone_name", ZONES)
@pytest.mark.parametrize("expr", ["30 1 * * *", "30 2 * * *", "0 0 * * *", "45 1 * * *", "0 2 * * *"])
def test_daily_pinned_job_fires_once_per_local_day(zone_name: str, expr: str) -> None:
    tz = ZoneInfo(zone_name)
    cron = Cron(expr, zone_name)
    cursor = datetime(2026, 1, 1, tzinfo=tz)
    days: list[date] = []
    while True:
        cursor = cron.next_after(cursor)
        local = cursor.astimezone(tz)
        if local.year > 2026:
            break
        days.append(local.date())
    first = date(2026, 1, 1) if expr != "0 0 * * *" else date(2026, 1, 2)  # midnight of Jan 1 is not after itself
    assert days == [first + timedelta(days=i) for i in range((date(2027, 1, 1) - first).days)]


def test_new_york_spring_gap_and_fall_repeat() -> None:
    """The rules spelled out: pinned jobs fire once, wildcard-hour jobs follow real time."""
    ny = "America/New_York"
    spring = datetime(2026, 3, 8, 5, 0, tzinfo=UTC)  # 00:00 EST
    assert Cron("30 2 * * *", ny).next_after(spring) == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 03:00 EDT
    fall = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)  # 00:00 EDT
    pinned = Cron("30 1 * * *", ny)
    first = pinned.next_after(fall)
    assert first == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)  # first 01:30 (EDT)
    assert pinned.next_after(first) == datetime(2026, 11, 2, 6, 30, tzinfo=UTC)  # not the EST 01:30
    hourly = Cron("30 * * * *", ny)
    assert hourly.next_after(first) == datetime(2026, 11, 1, 6, 30, tzinfo=UTC)  # 01:30 EST too
    in_gap = Cron("*/20 * * * *", ny).next_after(datetime(2026, 3, 8, 6, 50, tzinfo=UTC))
    assert in_gap == datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # 01:50 EST -> 03:00 EDT, no 02:xx


def test_lord_howe_half_hour_gap() -> None:
    """Lord Howe springs from 02:00 to 02:30: a 02:15 job fires at 02:30 local."""
    got = Cron("15 2 * * *", "Australia/Lord_Howe").next_after(datetime(2026, 10, 3, 12, 0, tzinfo=UTC))
    local = got.astimezone(ZoneInfo("Australia/Lord_Howe"))
    assert (local.date(), local.hour, local.minute) == (date(2026, 10, 4), 2, 30)


@pytest.mark.timeout(30)
@pytest.mark.parametrize(
    ("expr", "zone_name", "after", "expected"),
    [
        # Chatham falls back at 03:45 to 02:45: 03:00-03:44 is repeated and the walk used to cycle.
        ("* 3 * * *", "Pacific/Chatham", "2027-04-03T14:00:00Z", "2027-04-03T14:15:00Z"),
        ("*/15 3 * * *", "Pacific/Chatham", "2026-04-04T13:00:00Z", "2026-04-04T13:15:00Z"),
        # Lord Howe's 30-minute shift: 19:00 local stays 19:00 local.
        ("* 19 * * *", "Australia/Lord_Howe", "2026-04-04T14:00:00Z", "2026-04-05T08:30:00Z"),
        # Havana springs forward at midnight: 01:00 exists that Sunday.
        ("* 1 * * 7", "America/Havana", "2025-03-08T01:00:00Z", "2025-03-09T05:00:00Z"),
    ],
)
def test_issue_12_examples_follow_debian(expr: str, zone_name: str, after: str, expected: str) -> None:
    """Debian's answers (the oracle's too); each used to hang or come out wrong."""
    got = Cron(expr, zone_name).next_after(datetime.fromisoformat(after.replace("Z", "+00:00")))
    assert got == datetime.fromisoformat(expected.replace("Z", "+00:00"))
