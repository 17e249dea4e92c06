"""Cron parser forms with concrete expected fires (UTC unless a zone is named)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from zoneinfo import available_timezones

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runledger_beat.errors import ScheduleError
from runledger_beat.timing.cron import Cron, compile_cron

UTC = timezone.utc
SUNDAY = datetime(2026, 3, 1, tzinfo=UTC)  # 2026-03-01 is a Sunday


def at(text: str) -> datetime:
    """ISO text (UTC) -> aware datetime."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def fires(expr: str, start: datetime, count: int, day_and: bool = False, tz: str = "UTC") -> list[datetime]:
    """`count` successive fires strictly after start."""
    cron, out, cursor = Cron(expr, tz, day_and), [], start
    for _ in range(count):
        cursor = cron.next_after(cursor)
        out.append(cursor)
    return out


@pytest.mark.parametrize(
    ("expr", "start", "expected"),
    [
        ("*/15 * * * *", "2026-03-01T10:07:00", ["2026-03-01T10:15:00", "2026-03-01T10:30:00", "2026-03-01T10:45:00"]),
        ("5-15/5 3 * * *", "2026-03-01T00:00:00",
         ["2026-03-01T03:05:00", "2026-03-01T03:10:00", "2026-03-01T03:15:00"]),
        ("50/5 * * * *", "2026-03-01T10:00:00", ["2026-03-01T10:50:00", "2026-03-01T10:55:00", "2026-03-01T11:50:00"]),
        ("0 9,17 * * *", "2026-03-01T12:00:00", ["2026-03-01T17:00:00", "2026-03-02T09:00:00", "2026-03-02T17:00:00"]),
        ("0 0 * JAN,jul *", "2026-03-01T00:00:00",
         ["2026-07-01T00:00:00", "2026-07-02T00:00:00", "2026-07-03T00:00:00"]),
        ("0 0 1 feb-Mar *", "2026-03-01T00:00:00",
         ["2027-02-01T00:00:00", "2027-03-01T00:00:00", "2028-02-01T00:00:00"]),
        ("0 8 * * MON-FRI", "2026-03-06T09:00:00",
         ["2026-03-09T08:00:00", "2026-03-10T08:00:00", "2026-03-11T08:00:00"]),
        ("0 0 * * 0", "2026-03-01T00:00:00", ["2026-03-08T00:00:00", "2026-03-15T00:00:00", "2026-03-22T00:00:00"]),
        ("0 0 * * 7", "2026-03-01T00:00:00", ["2026-03-08T00:00:00", "2026-03-15T00:00:00", "2026-03-22T00:00:00"]),
        ("0 0 * * sun", "2026-03-01T00:00:00", ["2026-03-08T00:00:00", "2026-03-15T00:00:00", "2026-03-22T00:00:00"]),
        ("0 0 * * 5-7", "2026-03-01T00:00:00", ["2026-03-06T00:00:00", "2026-03-07T00:00:00", "2026-03-08T00:00:00"]),
        ("0 0 29 2 *", "2026-03-01T00:00:00", ["2028-02-29T00:00:00", "2032-02-29T00:00:00", "2036-02-29T00:00:00"]),
        ("0 0 31 * *", "2026-03-31T00:00:00", ["2026-05-31T00:00:00", "2026-07-31T00:00:00", "2026-08-31T00:00:00"]),
        ("@hourly", "2026-03-01T10:30:00", ["2026-03-01T11:00:00", "2026-03-01T12:00:00", "2026-03-01T13:00:00"]),
        ("@daily", "2026-03-01T10:30:00", ["2026-03-02T00:00:00", "2026-03-03T00:00:00", "2026-03-04T00:00:00"]),
        ("@midnight", "2026-03-01T10:30:00", ["2026-03-02T00:00:00", "2026-03-03T00:00:00", "2026-03-04T00:00:00"]),
        ("@weekly", "2026-03-01T10:30:00", ["2026-03-08T00:00:00", "2026-03-15T00:00:00", "2026-03-22T00:00:00"]),
        ("@monthly", "2026-03-01T10:30:00", ["2026-04-01T00:00:00", "2026-05-01T00:00:00", "2026-06-01T00:00:00"]),
        ("@yearly", "2026-03-01T10:30:00", ["2027-01-01T00:00:00", "2028-01-01T00:00:00", "2029-01-01T00:00:00"]),
        ("@annually", "2026-03-01T10:30:00", ["2027-01-01T00:00:00", "2028-01-01T00:00:00", "2029-01-01T00:00:00"]),
        ("0 * * * * *", "2026-03-01T10:30:00", ["2026-03-01T10:31:00", "2026-03-01T10:32:00", "2026-03-01T10:33:00"]),
        ("* * * * * *", "2026-03-01T10:30:00", ["2026-03-01T10:30:01", "2026-03-01T10:30:02", "2026-03-01T10:30:03"]),
        ("*/20 * * * * *", "2026-03-01T10:30:05",
         ["2026-03-01T10:30:20", "2026-03-01T10:30:40", "2026-03-01T10:31:00"]),
        ("30 0 12 * * *", "2026-03-01T10:30:00", ["2026-03-01T12:00:30", "2026-03-02T12:00:30", "2026-03-03T12:00:30"]),
        ("0 0 ? * MON", "2026-03-01T00:00:00", ["2026-03-02T00:00:00", "2026-03-09T00:00:00", "2026-03-16T00:00:00"]),
    ],
)
def test_forms(expr: str, start: str, expected: list[str]) -> None:
    assert fires(expr, at(start), len(expected)) == [at(e) for e in expected]


def test_day_fields_are_ored_when_both_restricted() -> None:
    # 13th of the month OR any Friday (2026-03-06 and 2026-03-13 are Fridays).
    got = fires("0 0 13 * FRI", SUNDAY, 4)
    assert got == [
        at("2026-03-06T00:00:00"), at("2026-03-13T00:00:00"), at("2026-03-20T00:00:00"), at("2026-03-27T00:00:00"),
    ]
    got = fires("0 0 1,15 * MON", SUNDAY, 3)
    assert got == [at("2026-03-02T00:00:00"), at("2026-03-09T00:00:00"), at("2026-03-15T00:00:00")]


def test_day_fields_anded_for_celery_crontab() -> None:
    # Friday the 13th only: 2026-03-13, 2026-11-13, 2027-08-13.
    got = fires("0 0 13 * FRI", SUNDAY, 3, day_and=True)
    assert got == [at("2026-03-13T00:00:00"), at("2026-11-13T00:00:00"), at("2027-08-13T00:00:00")]


def test_star_step_day_field_means_and() -> None:
    # Vixie: a day field starting with '*' ANDs: odd days that are Mondays.
    got = fires("0 0 */2 * MON", SUNDAY, 3)
    assert got == [at("2026-03-09T00:00:00"), at("2026-03-23T00:00:00"), at("2026-04-13T00:00:00")]


def test_strictly_after_and_microseconds() -> None:
    cron = Cron("0 * * * *")
    assert cron.next_after(at("2026-03-01T10:00:00")) == at("2026-03-01T11:00:00")
    assert cron.next_after(at("2026-03-01T09:59:59.999999")) == at("2026-03-01T10:00:00")


def test_returns_utc_for_zoned_cron() -> None:
    got = Cron("0 9 * * *", "Asia/Kathmandu").next_after(at("2026-03-01T00:00:00"))
    assert got == at("2026-03-01T03:15:00") and got.tzinfo is UTC


def test_never_fires_beyond_search_is_rejected() -> None:
    with pytest.raises(ScheduleError, match="can never fire"):
        Cron("0 0 31 4,6,9,11 *")
    Cron("0 0 31 4,6,9,11 MON")  # OR with a weekday: fires on Mondays


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("* * *", "expected 5 or 6 fields, got 3"),
        ("", "expected 5 or 6 fields, got 0"),
        ("* * * * * * *", "expected 5 or 6 fields, got 7"),
        ("x * * * *", "minute: 'x' is not a number"),
        ("60 * * * *", "minute: 60 is out of range 0-59"),
        ("* 24 * * *", "hour: 24 is out of range 0-23"),
        ("* * 0 * *", "day-of-month: 0 is out of range 1-31"),
        ("* * * 13 *", "month: 13 is out of range 1-12"),
        ("* * * * 8", "day-of-week: 8 is out of range 0-7"),
        ("* * * * FOO", "day-of-week: 'FOO' is not a number"),
        ("*/0 * * * *", "minute: step must be at least 1, got 0"),
        ("5-2 * * * *", "minute: range 5-2 is backwards"),
        ("1,,2 * * * *", "minute: '' is not a number"),
        ("60 * * * * *", "second: 60 is out of range 0-59"),
        ("@reboot", "unknown nickname '@reboot'"),
        ("0 0 30 2 *", "0 0 30 2 * can never fire"),
    ],
)
def test_parse_errors(expr: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as info:
        compile_cron(expr)
    assert info.value.field == "cron"
    assert info.value.reason == reason
    assert str(info.value) == f"cron: {reason}"


# ---------------------------------------------------------------------------
# Bounded search: no expression, zone and instant makes next_after run long

CALL_LIMIT_SECONDS = 0.5  # generous for a loaded 2-core machine; typical calls take microseconds
ZONES = sorted(available_timezones())


def _field(low: int, high: int, day: str | None = None) -> st.SearchStrategy[str]:
    """One cron field: wildcard, step, number, range, list, H forms, and the day extensions."""
    number = st.integers(low, high)
    plain = st.one_of(
        st.just("*"),
        st.builds("*/{}".format, st.integers(1, high + 1)),
        number.map(str),
        st.tuples(number, number).map(lambda p: f"{min(p)}-{max(p)}"),
        st.tuples(number, number, st.integers(1, 9)).map(lambda p: f"{min(p[:2])}-{max(p[:2])}/{p[2]}"),
        st.lists(number, min_size=2, max_size=4).map(lambda v: ",".join(map(str, v))),
        st.sampled_from(["H", f"H({low}-{high})", "H/7", f"H({low}-{low + 1})/2"]),
    )
    if day == "dom":
        return st.one_of(plain, st.sampled_from(["L", "LW", "1W", "15W", "31W", "L,15"]))
    if day == "dow":
        return st.one_of(plain, st.sampled_from(["5L", "0L", "1#1", "6#5", "0#2", "1#5,3"]))
    return plain


EXPRESSIONS = st.one_of(
    st.tuples(_field(0, 59), _field(0, 23), _field(1, 31, "dom"), _field(1, 12), _field(0, 7, "dow")),
    st.tuples(_field(0, 59), _field(0, 59), _field(0, 23), _field(1, 31, "dom"), _field(1, 12), _field(0, 7, "dow")),
).map(" ".join)
INSTANTS = st.one_of(
    st.datetimes(datetime(1900, 1, 1), datetime(2100, 1, 1), timezones=st.just(UTC)),
    st.datetimes(datetime(2025, 1, 1), datetime(2036, 1, 1), timezones=st.just(UTC)),
    st.sampled_from([datetime(1, 1, 2, tzinfo=UTC), datetime(9999, 12, 30, tzinfo=UTC)]),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=EXPRESSIONS, zone_name=st.sampled_from(ZONES), t=INSTANTS, day_and=st.booleans())
def test_next_after_is_bounded(expr: str, zone_name: str, t: datetime, day_and: bool) -> None:
    try:
        cron = Cron(expr, zone_name, day_and, hash_id=uuid.UUID(int=7))
    except ScheduleError:
        return
    began = time.thread_time()  # CPU time: what the search costs, whatever else the machine is doing
    fire = cron.next_after(t)
    elapsed = time.thread_time() - began
    assert elapsed < CALL_LIMIT_SECONDS, f"{expr!r} in {zone_name} after {t}: {elapsed:.3f} s"
    if fire is not None:
        assert fire > t
        assert cron.next_after(fire - timedelta(microseconds=1)) == fire  # a fire is found from just before it
