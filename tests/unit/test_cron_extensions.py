"""Cron extensions: L, LW, nW, nL, n#k against croniter / cronsim (UTC) and the Debian oracle (DST), and H."""

from __future__ import annotations

import hashlib
import json
import random
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from cronsim import CronSim

from runledger_beat.errors import ScheduleError
from runledger_beat.ops.preview import preview_command
from runledger_beat.timing.cron import Cron, compile_cron, hash_choice
from runledger_beat.timing.engine import Timing, next_fire_after
from runledger_beat.timing.rows import timing_from_row

from ..support import debian_oracle as oracle

UTC = timezone.utc
FIRES = 12
NIL = uuid.UUID(int=0)
ID = uuid.UUID("018fa1f8-0000-7000-8000-000000000123")


def successive(cron: Cron, start: datetime, count: int = FIRES) -> list[datetime]:
    """`count` successive fires strictly after start."""
    out, cursor = [], start
    for _ in range(count):
        cursor = cron.next_after(cursor)
        out.append(cursor)
    return out


def random_starts(seed: int, count: int) -> list[datetime]:
    """Instants spread over 2025-2034 (UTC), to the second."""
    rng = random.Random(seed)
    base = datetime(2025, 1, 1, tzinfo=UTC)
    return [base + timedelta(seconds=rng.randint(0, 10 * 365 * 86400)) for _ in range(count)]


# ---------------------------------------------------------------------------
# UTC: croniter and cronsim as references

CRONITER_FORMS = [  # (ours, croniter's spelling)
    ("0 0 L * *", "0 0 L * *"),
    ("30 12 L 2 *", "30 12 L 2 *"),
    ("15 6 15W * *", "15 6 15W * *"),
    ("0 9 1W * *", "0 9 1W * *"),
    ("0 9 31W * *", "0 9 31W * *"),
    ("45 23 30W * *", "45 23 30W * *"),
    ("0 8 * * 5L", "0 8 * * L5"),
    ("0 8 * * 0L", "0 8 * * L0"),
    ("0 0 * * 1#1", "0 0 * * 1#1"),
    ("10 10 * * 5#3", "10 10 * * 5#3"),
    ("0 0 * * 1#5", "0 0 * * 1#5"),
    ("0 0 * * 7#2", "0 0 * * 0#2"),
    ("*/30 1 * * 6#4", "*/30 1 * * 6#4"),
]
CRONSIM_FORMS = [
    "0 0 L * *",
    "0 18 LW * *",
    "*/20 3 LW 1-6 *",
    "0 8 * * 5L",
    "0 8 * * 7L",
    "0 0 * * 1#5",
    "0 12 * * MON#2",
    "0 0 L * 5",  # both day fields restricted: OR
    "0 0 1 * 3L",
]


@pytest.mark.parametrize(("ours", "theirs"), CRONITER_FORMS)
def test_day_extensions_agree_with_croniter(ours: str, theirs: str) -> None:
    for start in random_starts(len(ours), 6):
        expected = croniter(theirs, start)
        assert successive(Cron(ours), start) == [expected.get_next(datetime) for _ in range(FIRES)], (ours, start)


@pytest.mark.parametrize("expr", CRONSIM_FORMS)
def test_day_extensions_agree_with_cronsim(expr: str) -> None:
    for start in random_starts(len(expr) + 7, 6):
        expected = CronSim(expr, start)
        assert successive(Cron(expr), start) == [next(expected) for _ in range(FIRES)], (expr, start)


def test_nearest_weekday_stays_in_month() -> None:
    # 2026-02-01 is a Sunday: 1W -> Monday the 2nd; 2026-05-31 is a Sunday: 31W -> Friday the 29th.
    assert Cron("0 0 1W 2 *").next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 2, 2, tzinfo=UTC)
    assert Cron("0 0 31W 5 *").next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(2026, 5, 29, tzinfo=UTC)
    # 2026-08-01 is a Saturday: 1W -> Monday the 3rd, never July 31.
    assert Cron("0 0 1W 8 *").next_after(datetime(2026, 7, 1, tzinfo=UTC)) == datetime(2026, 8, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("0 0 32W * *", "day-of-month: 32 is out of range 1-31"),
        ("0 0 W * *", "day-of-month: '' is not a number"),
        ("0 0 * * 5#6", "day-of-week: #6 is not a week number 1-5"),
        ("0 0 * * 5#", "day-of-week: # is not a week number 1-5"),
        ("0 0 * * 8L", "day-of-week: 8 is out of range 0-7"),
        ("0 0 * * 9#1", "day-of-week: 9 is out of range 0-7"),
        ("L * * * *", "minute: 'L' is not a number"),
        ("0 0 * L *", "month: 'L' is not a number"),
        ("0 0 L/2 * *", "day-of-month: 'L' is not a number"),
        ("H(30-10) * * * *", "minute: range 30-10 is backwards"),
        ("H(0-60) * * * *", "minute: 60 is out of range 0-59"),
        ("H/0 * * * *", "minute: step must be at least 1, got 0"),
        ("Hx * * * *", "minute: 'Hx' is not an H form (H, H(a-b), H/n or H(a-b)/n)"),
        ("H(5) * * * *", "minute: '5' is not a range a-b"),
    ],
)
def test_extension_errors(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as info:
        compile_cron(expr)
    assert (info.value.field, info.value.reason) == ("cron", reason)


# ---------------------------------------------------------------------------
# DST: the Debian oracle as judge

DST_CASES = [  # (expression, zone, UTC instant near a transition)
    ("30 2 * 3 0#2", "America/New_York", datetime(2026, 3, 8, 7, tzinfo=UTC)),  # pinned in the gap: 03:00 EDT
    ("30 1 * 11 0#1", "America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),  # repeated: first pass only
    ("*/20 1 * 11 0#1", "America/New_York", datetime(2026, 11, 1, 6, tzinfo=UTC)),  # wildcard: both passes
    ("30 2 * 3 0L", "Europe/Paris", datetime(2026, 3, 29, 1, tzinfo=UTC)),
    ("* 2 * 10 0L", "Europe/Paris", datetime(2026, 10, 25, 1, tzinfo=UTC)),
    ("0 0 * 9 0#1", "America/Santiago", datetime(2026, 9, 6, 4, tzinfo=UTC)),  # midnight in the gap
    ("* 23 * 4 6#1", "America/Santiago", datetime(2026, 4, 5, 3, tzinfo=UTC)),  # 23:xx twice
    ("15 0 8W 3 *", "America/Havana", datetime(2026, 3, 8, 5, tzinfo=UTC)),
    ("30 0 24W 4 *", "Africa/Cairo", datetime(2026, 4, 23, 22, tzinfo=UTC)),  # Friday midnight gap
    ("* 23 29W 10 *", "Africa/Cairo", datetime(2026, 10, 29, 21, tzinfo=UTC)),  # Thursday 23:xx twice
    ("40 1 * 4 0#1", "Australia/Lord_Howe", datetime(2026, 4, 4, 15, tzinfo=UTC)),
    ("*/7 1-2 * 10 0#1", "Australia/Lord_Howe", datetime(2026, 10, 3, 15, 30, tzinfo=UTC)),
    ("* 3 * 4 0#1", "Pacific/Chatham", datetime(2027, 4, 3, 14, tzinfo=UTC)),
    ("50 2 * 9 0L", "Pacific/Chatham", datetime(2026, 9, 26, 14, tzinfo=UTC)),
    ("*/15 3 * 4 0#1", "Pacific/Chatham", datetime(2026, 4, 4, 14, tzinfo=UTC)),
]


@pytest.mark.parametrize(("expr", "zone_name", "centre"), DST_CASES)
def test_day_extensions_at_transitions_follow_debian(expr: str, zone_name: str, centre: datetime) -> None:
    line = oracle.timeline(zone_name, centre - timedelta(days=1), centre + timedelta(days=1))
    expected = oracle.fires(oracle.parse(expr), line)
    assert expected, "the window must hold fires"
    cron = Cron(expr, zone_name)
    for step in range(0, 36 * 60, 7):
        after = centre - timedelta(hours=12) + timedelta(minutes=step, seconds=step % 60)
        want = oracle.next_fire(expected, after)
        if want is not None:
            assert cron.next_after(after) == want, (expr, zone_name, after)


def test_day_pattern_only_inside_gaps_never_fires() -> None:
    # 2:xx on the second Sunday of March never exists in New York: None, not a hang.
    assert Cron("* 2 * 3 0#2", "America/New_York").next_after(datetime(2026, 1, 1, tzinfo=UTC)) is None
    # The pinned form fires right after each gap instead.
    assert Cron("30 2 * 3 0#2", "America/New_York").next_after(datetime(2026, 1, 1, tzinfo=UTC)) == datetime(
        2026, 3, 8, 7, tzinfo=UTC
    )


# ---------------------------------------------------------------------------
# H: hashed values


def test_hash_is_blake2b_of_id_and_field_name() -> None:
    digest = hashlib.blake2b(ID.bytes + b"minute", digest_size=8).digest()
    assert hash_choice(ID, "minute", 60) == int.from_bytes(digest, "big") % 60
    minute = hash_choice(ID, "minute", 60)
    assert Cron("H * * * *", hash_id=ID).minutes == (minute,)
    assert Cron("H(0-29) * * * *", hash_id=ID).minutes == (hash_choice(ID, "minute", 30),)
    start = hash_choice(ID, "minute", 15)
    assert Cron("H/15 * * * *", hash_id=ID).minutes == (start, start + 15, start + 30, start + 45)
    start = hash_choice(ID, "minute", 10)
    assert Cron("H(30-59)/10 * * * *", hash_id=ID).minutes == (30 + start, 40 + start, 50 + start)


def test_hash_ranges_per_field() -> None:
    ids = [uuid.UUID(int=random.Random(i).getrandbits(128)) for i in range(300)]
    for schedule_id in ids:
        cron = Cron("H H H H H H", hash_id=schedule_id)
        assert len(cron.seconds) == len(cron.minutes) == len(cron.hours) == len(cron.months) == 1
        assert 1 <= min(cron.days_of_month) <= 28 and len(cron.days_of_month) == 1  # every month has the day
        assert len(cron.days_of_week) == 1 and 0 <= min(cron.days_of_week) <= 6


def test_thousand_hourly_h_schedules_spread_over_the_hour() -> None:
    rng = random.Random(12)
    minutes = Counter(Cron("H * * * *", hash_id=uuid.UUID(int=rng.getrandbits(128))).minutes[0] for _ in range(1000))
    assert len(minutes) == 60  # every minute used
    assert max(minutes.values()) <= 35  # about 17 each, never a thundering herd


def test_h_fires_like_the_hashed_numbers() -> None:
    for schedule_id in (ID, NIL, uuid.UUID(int=7)):
        hashed = Cron("H H(8-17) * * H", "Europe/Paris", hash_id=schedule_id)
        minute, hour, dow = hashed.minutes[0], hashed.hours[0], min(hashed.days_of_week)
        plain = Cron(f"{minute} {hour} * * {dow}", "Europe/Paris")
        assert 8 <= hour <= 17
        start = datetime(2026, 3, 20, tzinfo=UTC)
        assert successive(hashed, start) == successive(plain, start)


def test_h_is_a_fixed_time_job_under_dst() -> None:
    # H pins the minute and hour like a number: in the repeated hour only the first pass fires.
    schedule_id = next(
        uuid.UUID(int=i) for i in range(10_000) if hash_choice(uuid.UUID(int=i), "hour", 24) == 1
    )
    cron = Cron("H H * * *", "America/New_York", hash_id=schedule_id)
    minute = cron.minutes[0]
    first = cron.next_after(datetime(2026, 11, 1, 4, tzinfo=UTC))
    assert first == datetime(2026, 11, 1, 5, minute, tzinfo=UTC)  # 01:mm EDT
    assert cron.next_after(first) == datetime(2026, 11, 2, 6, minute, tzinfo=UTC)  # not 01:mm EST


def test_compile_cron_keys_on_id_only_for_h() -> None:
    assert compile_cron("*/5 * * * *", "UTC", False, ID) is compile_cron("*/5 * * * *", "UTC", False, NIL)
    assert compile_cron("*/5 * * * *", "UTC", False, ID) is compile_cron("*/5 * * * *")
    assert compile_cron("0 0 * * THU", "UTC", False, ID) is compile_cron("0 0 * * THU")  # THU is not an H term
    assert compile_cron("H * * * *", "UTC", False, ID) is not compile_cron("H * * * *", "UTC", False, NIL)
    assert compile_cron("H * * * *") is compile_cron("H * * * *", "UTC", False, NIL)  # validation: nil id


def test_timeengine_hashes_with_the_schedule_id() -> None:
    timing = Timing("cron", cron="H * * * *").validate()  # validation without an id uses the nil UUID
    after = datetime(2026, 5, 26, 12, 0, tzinfo=UTC)
    fires = {next_fire_after(timing, after, uuid.UUID(int=i)) for i in range(50)}
    assert len(fires) > 20
    expected = datetime(2026, 5, 26, 12, hash_choice(ID, "minute", 60), tzinfo=UTC)
    if expected <= after:
        expected += timedelta(hours=1)
    assert next_fire_after(timing, after, ID) == expected


def test_shared_row_timing_keeps_h_per_schedule() -> None:
    row = {"kind": "cron", "cron_expr": "H H * * *", "timezone": "Europe/Paris"}
    timing = timing_from_row(row)
    assert timing is timing_from_row(dict(row))  # shared: the id is not part of the timing
    after = datetime(2026, 6, 1, tzinfo=UTC)
    a, b = uuid.UUID(int=1), uuid.UUID(int=2)
    assert next_fire_after(timing, after, a) == compile_cron("H H * * *", "Europe/Paris", False, a).next_after(after)
    assert next_fire_after(timing, after, a) != next_fire_after(timing, after, b)


def test_preview_shows_hashed_fires_for_the_id(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--cron", "H * * * *", "--after", "2026-05-26T12:00:00Z", "--count", "2", "--id", str(ID), "--json"]
    assert preview_command(args) == 0
    minute = hash_choice(ID, "minute", 60)
    first = datetime(2026, 5, 26, 12, minute, tzinfo=UTC)
    first = first if minute > 0 else first + timedelta(hours=1)
    expected = [first, first + timedelta(hours=1)]
    assert json.loads(capsys.readouterr().out) == [f.strftime("%Y-%m-%dT%H:%M:%SZ") for f in expected]


def test_zone_local_h_daily_job() -> None:
    cron = Cron("H H * * *", "Asia/Kathmandu", hash_id=ID)
    local = cron.next_after(datetime(2026, 1, 1, tzinfo=UTC)).astimezone(ZoneInfo("Asia/Kathmandu"))
    assert (local.hour, local.minute) == (cron.hours[0], cron.minutes[0])
