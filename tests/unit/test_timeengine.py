"""Time engine: seed vectors, stale coalescing against the seed's plain search, bounds, validation."""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger_beat.errors import ScheduleError
from runledger_beat.timing.engine import (
    MAX_JITTER_SECONDS,
    Advance,
    Timing,
    _next_base,
    advance,
    compile_cron,
    fire_times,
    first_fire,
    format_rfc3339,
    jitter_seconds,
    next_fire_after,
    parse_duration,
)

UTC = timezone.utc
NIL = uuid.UUID(int=0)
SEED_ID = uuid.UUID("018fa1f8-0000-7000-8000-000000000123")
MATRIX_BASE = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)


def at(text: str) -> datetime:
    """RFC 3339 'Z' text -> aware UTC datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def every_minute(max_jitter: int = 0) -> Timing:
    """The seed's `0 * * * * *` schedule."""
    return Timing("cron", cron="0 * * * * *", max_jitter=max_jitter)


# -- seed vectors (design.md) -------------------------------------------------


def test_seed_vector_1_jittered_next_fire() -> None:
    assert next_fire_after(every_minute(30), at("2026-05-26T12:00:00Z"), SEED_ID) == at("2026-05-26T12:01:03Z")


def test_seed_vector_2_no_jitter() -> None:
    assert next_fire_after(every_minute(0), at("2026-05-26T12:00:00Z"), SEED_ID) == at("2026-05-26T12:01:00Z")


def test_seed_vector_3_stale_without_jitter() -> None:
    result = advance(every_minute(0), at("2026-02-01T12:00:00Z"), at("2026-02-01T12:05:00Z"), NIL)
    assert result == Advance(fire=True, next_fire_at=at("2026-02-01T12:06:00Z"))


def test_seed_vector_4_stale_with_jitter_60() -> None:
    result = advance(every_minute(60), at("2026-02-01T12:00:00Z"), at("2026-02-01T12:05:30Z"), NIL)
    assert result == Advance(fire=True, next_fire_at=at("2026-02-01T12:05:54Z"))


def test_seed_vector_5_every_second_jitter_5() -> None:
    timing = Timing("cron", cron="* * * * * *", max_jitter=5)
    result = advance(timing, at("2026-02-01T11:59:50Z"), at("2026-02-01T12:00:02Z"), NIL)
    assert result == Advance(fire=True, next_fire_at=at("2026-02-01T12:00:03Z"))


# -- stale coalescing against the seed's plain (no early stop) search ---------


def seed_next(timing: Timing, scheduled_for: datetime, now: datetime, sid: uuid.UUID) -> datetime | None:
    """Literal port of compute_next_fire_at_with_stale_coalescing_utc: scan max_jitter + 2 bases."""

    def jittered(base: datetime) -> datetime:
        return base + timedelta(seconds=jitter_seconds(sid, base, timing.max_jitter))

    def next_jittered(after: datetime) -> datetime | None:
        base = _next_base(timing, after)
        return None if base is None else jittered(base)

    following = next_jittered(scheduled_for)
    if following is None or following > now:
        return following
    if timing.max_jitter <= 0:
        return next_jittered(now)
    candidates, cursor = [], now - timedelta(seconds=timing.max_jitter + 1)
    for _ in range(timing.max_jitter + 2):
        base = _next_base(timing, cursor)
        if base is None:
            break
        candidates.append(jittered(base))
        cursor = base
    after_now = [c for c in candidates if c > now]
    return min(after_now) if after_now else next_jittered(now)


def true_min_after(timing: Timing, now: datetime, sid: uuid.UUID, span: int) -> datetime:
    """Minimum jittered candidate strictly after now over every base in (now - span, now + span]."""
    best, cursor = None, now - timedelta(seconds=span)
    while True:
        base = _next_base(timing, cursor)
        assert base is not None
        if base > now + timedelta(seconds=span):
            assert best is not None
            return best
        candidate = base + timedelta(seconds=jitter_seconds(sid, base, timing.max_jitter))
        if candidate > now and (best is None or candidate < best):
            best = candidate
        cursor = base


MATRIX_GAPS = [1, 2, 7, 60]
MATRIX_IDS = [NIL, uuid.UUID(int=1), uuid.UUID(int=2**128 // 3), uuid.UUID(int=2**128 - 1)]
MATRIX_JITTERS = [1, 2, 30, 60, 300, 3600]
MATRIX_OFFSETS = [0, 1, 29, 59, 60, 3599]
CRON_FOR_GAP = {1: "* * * * * *", 2: "*/2 * * * * *", 60: "0 * * * * *"}


@pytest.mark.parametrize("gap", MATRIX_GAPS)
@pytest.mark.parametrize("sid", MATRIX_IDS, ids=["nil", "one", "third", "max"])
@pytest.mark.parametrize("max_jitter", MATRIX_JITTERS)
def test_seed_matrix(gap: int, sid: uuid.UUID, max_jitter: int) -> None:
    """The seed's matrix, read as: `gap` is the period between base fires (an interval
    schedule anchored at 2026-02-01T12:00:00Z, and the equivalent cron where one exists);
    the cursor is the first jittered fire from that base; `offset` is how far past the
    base the scheduler wakes (now = base + offset, at least the cursor).  advance() must
    fire the slot and move the cursor exactly as the seed's plain search does."""
    timings = [Timing("interval", every=gap, anchor=MATRIX_BASE, max_jitter=max_jitter)]
    if gap in CRON_FOR_GAP:
        timings.append(Timing("cron", cron=CRON_FOR_GAP[gap], max_jitter=max_jitter))
    for timing in timings:
        scheduled_for = first_fire(timing, MATRIX_BASE - timedelta(microseconds=1), sid)
        assert scheduled_for is not None
        for offset in MATRIX_OFFSETS:
            now = max(MATRIX_BASE + timedelta(seconds=offset), scheduled_for)
            result = advance(timing, scheduled_for, now, sid)
            assert result.fire is True
            assert result.next_fire_at == seed_next(timing, scheduled_for, now, sid), (timing, offset)
            assert result.next_fire_at is not None and result.next_fire_at > now


@settings(max_examples=200, deadline=None)
@given(
    sid=st.integers(0, 2**128 - 1).map(lambda n: uuid.UUID(int=n)),
    max_jitter=st.integers(0, 600),
    gap=st.integers(1, 900),
    offset=st.integers(0, 7200),
    late=st.integers(0, 100_000),
)
def test_fire_once_matches_seed_search(sid: uuid.UUID, max_jitter: int, gap: int, offset: int, late: int) -> None:
    """fire_once (with its early stop) equals the seed's plain scan; with gaps >= 2 s the
    scan cap never binds, so it is also the minimum jittered fire after now."""
    timing = Timing("interval", every=gap, anchor=MATRIX_BASE + timedelta(seconds=offset), max_jitter=max_jitter)
    scheduled_for = first_fire(timing, MATRIX_BASE, sid)
    assert scheduled_for is not None
    now = scheduled_for + timedelta(seconds=late, microseconds=late % 7)
    result = advance(timing, scheduled_for, now, sid)
    assert result.fire
    assert result.next_fire_at == seed_next(timing, scheduled_for, now, sid)
    stale = next_fire_after(timing, scheduled_for, sid)
    if gap >= 2 and stale is not None and stale <= now:
        assert result.next_fire_at == true_min_after(timing, now, sid, 2 * max_jitter + 2 * gap + 2)


@settings(max_examples=100, deadline=None)
@given(
    sid=st.integers(0, 2**128 - 1).map(lambda n: uuid.UUID(int=n)),
    max_jitter=st.integers(0, 120),
    expr=st.sampled_from(["* * * * * *", "*/5 * * * * *", "0 * * * * *", "*/7 * * * *", "0 * * * *"]),
    late=st.integers(0, 20_000),
)
def test_fire_once_cron_matches_seed_search(sid: uuid.UUID, max_jitter: int, expr: str, late: int) -> None:
    """The same check on cron schedules, including the every-second form where the cap matters."""
    timing = Timing("cron", cron=expr, max_jitter=max_jitter)
    scheduled_for = first_fire(timing, MATRIX_BASE, sid)
    assert scheduled_for is not None
    now = scheduled_for + timedelta(seconds=late)
    assert advance(timing, scheduled_for, now, sid).next_fire_at == seed_next(timing, scheduled_for, now, sid)


def test_large_jitter_every_second_is_fast_and_exact() -> None:
    """The bounded search with max_jitter = 86400 on an every-second cron (worst case)."""
    timing = Timing("cron", cron="* * * * * *", max_jitter=MAX_JITTER_SECONDS)
    scheduled_for = MATRIX_BASE
    now = MATRIX_BASE + timedelta(hours=30)
    result = advance(timing, scheduled_for, now, SEED_ID)
    assert result.next_fire_at == seed_next(timing, scheduled_for, now, SEED_ID)


# -- jitter, formatting, durations ----------------------------------------------


def test_jitter_formula() -> None:
    base = at("2026-05-26T12:01:00Z")
    assert jitter_seconds(SEED_ID, base, 30) == (SEED_ID.int ^ int(base.timestamp() * 1000)) % 31 == 3
    assert jitter_seconds(SEED_ID, base, 0) == 0
    assert jitter_seconds(SEED_ID, base, -5) == 0
    assert 0 <= jitter_seconds(uuid.UUID(int=2**128 - 1), base, 86400) <= 86400


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (at("2026-02-01T00:00:00Z"), "2026-02-01T00:00:00Z"),
        (at("2026-02-01T00:00:00.250Z"), "2026-02-01T00:00:00.250Z"),
        (at("2026-02-01T00:00:00.000001Z"), "2026-02-01T00:00:00.000001Z"),
        (datetime(2026, 2, 1, 1, 0, tzinfo=timezone(timedelta(hours=1))), "2026-02-01T00:00:00Z"),
    ],
)
def test_format_rfc3339(value: datetime, text: str) -> None:
    assert format_rfc3339(value) == text


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30s", 30), ("5m", 300), ("1h", 3600), ("1d", 86400), ("1h30m", 5400), ("90", 90), ("1.5", 1.5), ("2w", 1209600)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "5x", "1h30", "m5", "-5s"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ScheduleError) as info:
        parse_duration(text)
    assert info.value.field == "every"


# -- interval, one-off, bounds ----------------------------------------------------


def test_interval_stays_on_grid_after_a_million_steps() -> None:
    anchor = at("2026-01-01T00:00:00Z")
    timing = Timing("interval", every=1.5, anchor=anchor)
    millionth = next_fire_after(timing, anchor + timedelta(seconds=1.5 * 999_999), NIL)
    assert millionth == anchor + timedelta(microseconds=1_500_000 * 1_000_000)
    cursor = anchor
    for k in range(1, 2001):  # stepping a sample near the millionth fire
        cursor = next_fire_after(timing, cursor if k > 1 else anchor + timedelta(seconds=1_499_000.0), NIL)
        assert cursor == anchor + timedelta(microseconds=1_500_000 * (999_333 + k))


def test_interval_steps_exactly() -> None:
    anchor = at("2026-01-01T00:00:00.100Z")
    timing = Timing("interval", every=7, anchor=anchor)
    fires = fire_times(timing, anchor, NIL, 5)
    assert fires == [anchor + timedelta(seconds=7 * k) for k in range(1, 6)]


def test_interval_defaults_anchor_to_start() -> None:
    start = at("2026-03-01T10:00:03Z")
    timing = Timing("interval", every=60, start=start)
    assert first_fire(timing, at("2026-01-01T00:00:00Z"), NIL) == start
    assert first_fire(timing, at("2026-03-01T10:05:00Z"), NIL) == at("2026-03-01T10:05:03Z")


def test_one_off_fires_once() -> None:
    when = at("2026-03-01T10:00:00Z")
    timing = Timing("once", at=when)
    assert first_fire(timing, when - timedelta(days=1), NIL) == when
    assert first_fire(timing, when + timedelta(days=1), NIL) == when  # past: fires at once
    assert next_fire_after(timing, when, NIL) is None
    assert advance(timing, when, when + timedelta(seconds=1), NIL) == Advance(True, None)
    assert fire_times(timing, when - timedelta(seconds=1), NIL, 10) == [when]


def test_one_off_grace_and_end() -> None:
    when = at("2026-03-01T10:00:00Z")
    late = when + timedelta(minutes=10)
    assert advance(Timing("once", at=when, grace=60), when, late, NIL) == Advance(False, None)
    assert first_fire(Timing("once", at=when, end=when - timedelta(seconds=1)), when, NIL) is None


def test_start_and_end_bounds() -> None:
    start, end = at("2026-03-01T10:00:30Z"), at("2026-03-01T10:05:00Z")
    timing = Timing("cron", cron="* * * * *", start=start, end=end, max_jitter=20)
    fires = fire_times(timing, at("2026-01-01T00:00:00Z"), SEED_ID, 100)
    bases = [at(f"2026-03-01T10:0{m}:00Z") for m in range(1, 6)]
    jittered = [b + timedelta(seconds=jitter_seconds(SEED_ID, b, 20)) for b in bases]
    assert fires == [f for f in jittered if f <= end]
    assert all(start <= f <= end for f in fires)
    assert next_fire_after(timing, end, SEED_ID) is None
    assert advance(timing, fires[-1], fires[-1], SEED_ID).next_fire_at is None


def test_stale_cursor_past_end_finishes() -> None:
    timing = Timing("cron", cron="0 * * * *", end=at("2026-03-01T12:00:00Z"))
    result = advance(timing, at("2026-03-01T10:00:00Z"), at("2026-03-02T00:00:00Z"), NIL)
    assert result == Advance(True, None)


# -- misfire policies ----------------------------------------------------------------


def test_skip_policy() -> None:
    timing = Timing("cron", cron="0 * * * *", misfire="skip")
    slot = at("2026-03-01T10:00:00Z")
    assert advance(timing, slot, slot + timedelta(seconds=3), NIL) == Advance(True, at("2026-03-01T11:00:00Z"))
    assert advance(timing, slot, slot + timedelta(seconds=30), NIL) == Advance(False, at("2026-03-01T11:00:00Z"))
    stale = advance(timing, slot, slot + timedelta(hours=5, minutes=1), NIL)
    assert stale == Advance(False, at("2026-03-01T16:00:00Z"))
    graced = Timing("cron", cron="0 * * * *", misfire="skip", grace=120)
    assert advance(graced, slot, slot + timedelta(seconds=90), NIL).fire is True


def test_grace_window_fire_once() -> None:
    timing = Timing("cron", cron="0 * * * *", grace=60)
    slot = at("2026-03-01T10:00:00Z")
    assert advance(timing, slot, slot + timedelta(seconds=60), NIL).fire is True
    assert advance(timing, slot, slot + timedelta(seconds=61), NIL) == Advance(False, at("2026-03-01T11:00:00Z"))


def test_inputs_may_be_any_aware_zone_and_naive_is_rejected() -> None:
    paris = timezone(timedelta(hours=1))
    timing = every_minute()
    assert next_fire_after(timing, datetime(2026, 2, 1, 13, 0, tzinfo=paris), NIL) == at("2026-02-01T12:01:00Z")
    with pytest.raises(ScheduleError):
        next_fire_after(timing, datetime(2026, 2, 1, 12, 0), NIL)


def test_compile_cron_is_cached() -> None:
    assert compile_cron("*/5 * * * *", "Europe/Paris") is compile_cron("*/5 * * * *", "Europe/Paris")


# -- validation -------------------------------------------------------------------------

T0 = at("2026-03-01T10:00:00Z")
BAD = [
    (Timing("cron", cron="0 0 30 2 *"), "cron", "0 0 30 2 * can never fire"),
    (Timing("cron", cron="* * *"), "cron", "expected 5 or 6 fields, got 3"),
    (Timing("cron", cron="x * * * *"), "cron", "minute: 'x' is not a number"),
    (Timing("cron", cron="* * * * 8"), "cron", "day-of-week: 8 is out of range 0-7"),
    (Timing("cron"), "cron", "missing cron expression"),
    (Timing("cron", cron="* * * * *", timezone="Mars/Olympus"), "timezone", "unknown time zone 'Mars/Olympus'"),
    (Timing("cron", cron="* * * * *", max_jitter=90000), "max_jitter", "must be between 0 and 86400, got 90000"),
    (Timing("cron", cron="* * * * *", max_jitter=-1), "max_jitter", "must be between 0 and 86400, got -1"),
    (Timing("interval", every=0.5), "every", "must be at least 1 second, got 0.5"),
    (Timing("interval"), "every", "missing interval"),
    (Timing("once"), "at", "missing instant for a one-off schedule"),
    (Timing("once", at=datetime(2026, 1, 1)), "at", "must be a timezone-aware datetime"),
    (Timing("interval", every=5, start=T0, end=T0), "end", "end must be after start"),
    (Timing("interval", every=5, misfire="x"), "misfire", "unknown policy 'x'; expected fire_once or skip"),
    (Timing("interval", every=5, grace=-1), "grace", "must be at least 0 seconds, got -1"),
    (Timing("weekly"), "kind", "unknown kind 'weekly'; expected cron, interval or once"),
]


@pytest.mark.parametrize(("timing", "field", "reason"), BAD, ids=[f"{b[1]}-{i}" for i, b in enumerate(BAD)])
def test_validation_messages(timing: Timing, field: str, reason: str) -> None:
    with pytest.raises(ScheduleError) as info:
        timing.validate()
    assert (info.value.field, info.value.reason) == (field, reason)
    assert str(info.value) == f"{field}: {reason}"
    assert isinstance(info.value, ValueError)


def test_valid_timings_return_self() -> None:
    for timing in [
        Timing("cron", cron="@daily", timezone="Europe/London", max_jitter=86400, misfire="skip", grace=0),
        Timing("interval", every=1, start=T0, end=T0 + timedelta(days=1)),
        Timing("once", at=T0),
    ]:
        assert timing.validate() is timing


def test_upcoming_lists_an_active_rows_fires_and_nothing_for_a_paused_or_unplannable_one():
    from runledger_beat.timing.rows import upcoming

    row = {"id": "00000000-0000-0000-0000-000000000000", "kind": "cron", "cron_expr": "30 2 * * *",
           "timezone": "Europe/Paris", "is_active": True, "skip_dates": [], "calendar_dates": [date(2031, 1, 2)],
           "anchor_at": datetime(2030, 1, 1, tzinfo=timezone.utc)}
    after = datetime(2031, 1, 1, tzinfo=timezone.utc)
    assert upcoming(row, after, 3) == [datetime(2031, 1, d, 1, 30, tzinfo=timezone.utc) for d in (1, 3, 4)]
    assert upcoming(dict(row, is_active=False), after, 3) == []
    assert upcoming(dict(row, quarantined_at=after), after, 3) == []
    assert upcoming(dict(row, timezone="Nowhere/Bogus"), after, 3) == []
