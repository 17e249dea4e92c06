"""The pure time engine: when does a schedule fire next, and what to do when it is due.

Everything here is deterministic arithmetic on aware datetimes (no I/O, no
clock reads), so every beat process computes the same cursor.  The jitter
formula and the stale-coalescing rule are the seed's (Rust scheduler loop).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone

from ..errors import ScheduleError
from .cron import Cron, compile_cron, zone
from .formats import format_rfc3339, parse_duration

__all__ = [
    "Advance",
    "Cron",
    "MAX_JITTER_SECONDS",
    "MISFIRE_POLICIES",
    "ScheduleError",
    "Timing",
    "advance",
    "compile_cron",
    "fire_times",
    "first_fire",
    "format_rfc3339",
    "jitter_seconds",
    "next_fire_after",
    "parse_duration",
]

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)
ONE_MILLISECOND = timedelta(milliseconds=1)
MAX_JITTER_SECONDS = 86400
MISFIRE_POLICIES = ("fire_once", "skip")
KINDS = ("cron", "interval", "once")
DEFAULT_SKIP_LATENESS = 5.0  # seconds a slot may be late under "skip" without a grace
U128 = (1 << 128) - 1
#: Skip dates: the most excluded local days in a row the next-fire search passes over (ten years of
#: daily fires); a longer run of excluded days is a ScheduleError("skip_dates").
MAX_SKIPPED_DAYS = 3660


def _aware(field: str, value: datetime | None) -> None:
    """Reject a naive datetime for `field`."""
    if value is not None and (not isinstance(value, datetime) or value.utcoffset() is None):
        raise ScheduleError(field, "must be a timezone-aware datetime")


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: the cron / interval / one-off form plus its policies."""

    kind: str
    cron: str | None = None
    day_and: bool = False
    every: float | None = None
    at: datetime | None = None
    anchor: datetime | None = None
    timezone: str = "UTC"
    start: datetime | None = None
    end: datetime | None = None
    max_jitter: int = 0
    misfire: str = "fire_once"
    grace: float | None = None
    #: Local dates (in ``timezone``) on which a cron or interval schedule never fires; see next_fire_after.
    skip_dates: frozenset[date] = frozenset()

    def validate(self) -> Timing:
        """Check every field (raising ScheduleError naming it) and return self."""
        if self.kind not in KINDS:
            raise ScheduleError("kind", f"unknown kind {self.kind!r}; expected cron, interval or once")
        zone(self.timezone)
        for name in ("at", "anchor", "start", "end"):
            _aware(name, getattr(self, name))
        if not isinstance(self.skip_dates, frozenset) or not all(
                isinstance(d, date) and not isinstance(d, datetime) for d in self.skip_dates):
            raise ScheduleError("skip_dates", "must be a frozenset of dates")
        self._validate_form()
        if self.start is not None and self.end is not None and self.end <= self.start:
            raise ScheduleError("end", "end must be after start")
        if isinstance(self.max_jitter, bool) or not isinstance(self.max_jitter, int):
            raise ScheduleError("max_jitter", f"must be an integer, got {self.max_jitter!r}")
        if not 0 <= self.max_jitter <= MAX_JITTER_SECONDS:
            raise ScheduleError(
                "max_jitter", f"must be between 0 and {MAX_JITTER_SECONDS}, got {self.max_jitter}"
            )
        if self.misfire not in MISFIRE_POLICIES:
            raise ScheduleError("misfire", f"unknown policy {self.misfire!r}; expected fire_once or skip")
        if self.grace is not None and (isinstance(self.grace, bool) or not isinstance(self.grace, (int, float))):
            raise ScheduleError("grace", f"must be a number of seconds, got {self.grace!r}")
        if self.grace is not None and not self.grace >= 0:
            raise ScheduleError("grace", f"must be at least 0 seconds, got {self.grace}")
        return self

    def excludes(self, instant: datetime) -> bool:
        """Whether ``instant`` falls on one of the skip dates (local date in the schedule's zone)."""
        return bool(self.skip_dates) and self.kind != "once" and \
            instant.astimezone(zone(self.timezone)).date() in self.skip_dates

    def excludes_fire(self, fire: datetime) -> bool:
        """Whether a (jittered) fire's un-jittered slot surely lies on a skip date: the slot is at most
        max_jitter seconds before the fire, and skip dates apply to slots (see _next_base)."""
        return self.excludes(fire) and (self.max_jitter == 0
                                        or self.excludes(fire - timedelta(seconds=self.max_jitter)))

    def _validate_form(self) -> None:
        """The cron / interval / one-off part of validate()."""
        if self.kind == "cron":
            if not self.cron:
                raise ScheduleError("cron", "missing cron expression")
            compile_cron(self.cron, self.timezone, self.day_and)  # H terms validate with the nil id
        elif self.kind == "interval":
            if self.every is None:
                raise ScheduleError("every", "missing interval")
            if isinstance(self.every, bool) or not isinstance(self.every, (int, float)):
                raise ScheduleError("every", f"must be a number of seconds, got {self.every!r}")
            if not self.every >= 1:
                raise ScheduleError("every", f"must be at least 1 second, got {self.every}")
        elif self.at is None:
            raise ScheduleError("at", "missing instant for a one-off schedule")


@dataclass(frozen=True)
class Advance:
    """Outcome of a due cursor: record a fire for the slot now? and the next cursor (None = finished)."""

    fire: bool
    next_fire_at: datetime | None


# ---------------------------------------------------------------------------
# Small helpers


def _utc(field: str, value: datetime) -> datetime:
    """Aware input -> UTC; naive input is a ScheduleError."""
    _aware(field, value)
    return value.astimezone(UTC)


def _micros(dt: datetime) -> int:
    """Exact integer microseconds since the Unix epoch."""
    return (dt - EPOCH) // ONE_MICROSECOND


def jitter_seconds(schedule_id: uuid.UUID, base: datetime, max_jitter: int) -> int:
    """Seed jitter: (id as u128 XOR base Unix millis) mod (max+1); 0 when max <= 0."""
    if max_jitter <= 0:
        return 0
    millis = ((base - EPOCH) // ONE_MILLISECOND) & U128  # i64 -> u128 like Rust's `as`
    return (schedule_id.int ^ millis) % (max_jitter + 1)


def _jittered(timing: Timing, base: datetime, schedule_id: uuid.UUID) -> datetime:
    """A base fire plus its (non-negative) jitter."""
    return base + timedelta(seconds=jitter_seconds(schedule_id, base, timing.max_jitter))


def _next_base(timing: Timing, after: datetime, schedule_id: uuid.UUID | None = None) -> datetime | None:
    """First un-jittered fire strictly after `after` whose local date is not a skip date (end is not applied).

    An excluded fire moves the search to the start of the next local day; at most MAX_SKIPPED_DAYS
    excluded days in a row are passed over before giving up with ScheduleError("skip_dates") (the
    beat then defers the schedule like any row it cannot plan).
    """
    base = _next_slot(timing, after, schedule_id)
    if not timing.skip_dates or timing.kind == "once":
        return base
    tz = zone(timing.timezone)
    for _ in range(MAX_SKIPPED_DAYS):
        if base is None:
            return None
        day = base.astimezone(tz).date()
        if day not in timing.skip_dates:
            return base
        next_day = datetime.combine(day + timedelta(days=1), time(0), tzinfo=tz).astimezone(UTC)
        base = _next_slot(timing, max(next_day - ONE_MICROSECOND, base), schedule_id)
    raise ScheduleError("skip_dates", f"more than {MAX_SKIPPED_DAYS} days in a row with every fire excluded")


def _next_slot(timing: Timing, after: datetime, schedule_id: uuid.UUID | None = None) -> datetime | None:
    """First un-jittered fire strictly after `after`, never before start (end and skip dates are not applied);
    ``schedule_id`` seeds H terms."""
    if timing.start is not None and after < timing.start:
        after = timing.start - ONE_MICROSECOND
    if timing.kind == "cron":
        return compile_cron(timing.cron or "", timing.timezone, timing.day_and, schedule_id).next_after(after)
    if timing.kind == "interval":
        every = round(float(timing.every or 0) * 1_000_000)
        if every < 1_000_000:
            raise ScheduleError("every", f"must be at least 1 second, got {timing.every}")
        anchor = _micros(timing.anchor or timing.start or EPOCH)
        k = (_micros(after) - anchor) // every + 1
        return EPOCH + timedelta(microseconds=anchor + k * every)
    if timing.kind == "once":
        at = _utc("at", timing.at) if timing.at is not None else None
        return at if at is not None and at > after else None
    raise ScheduleError("kind", f"unknown kind {timing.kind!r}; expected cron, interval or once")


def _before_end(timing: Timing, fire: datetime | None) -> datetime | None:
    """Drop a fire that falls after the end bound."""
    if fire is None or (timing.end is not None and fire > timing.end):
        return None
    return fire


def _next_jittered(timing: Timing, after: datetime, schedule_id: uuid.UUID) -> datetime | None:
    """Seed's next_jittered_fire_after_utc: jitter the first base strictly after `after`."""
    base = _next_base(timing, after, schedule_id)
    return None if base is None else _jittered(timing, base, schedule_id)


def _coalesce(timing: Timing, now: datetime, schedule_id: uuid.UUID) -> datetime | None:
    """Seed's compute_coalesced_next_fire_after_now_utc: earliest jittered fire > now.

    Bases are searched from now - (max_jitter + 1) s, at most max_jitter + 2 of
    them as in the seed.  Jitter is never negative, so once a base passes the best
    candidate no later base can win: stopping there gives the seed's result.
    """
    if timing.max_jitter <= 0:
        return _next_jittered(timing, now, schedule_id)
    best: datetime | None = None
    cursor = now - timedelta(seconds=timing.max_jitter + 1)
    for _ in range(timing.max_jitter + 2):
        base = _next_base(timing, cursor, schedule_id)
        if base is None or (best is not None and base > best):
            break
        candidate = _jittered(timing, base, schedule_id)
        if candidate > now and (best is None or candidate < best):
            best = candidate
        cursor = base
    return best if best is not None else _next_jittered(timing, now, schedule_id)


# ---------------------------------------------------------------------------
# Public API


def next_fire_after(timing: Timing, after: datetime, schedule_id: uuid.UUID) -> datetime | None:
    """First jittered fire whose base is strictly after `after`, within start/end; None if none."""
    after = _utc("after", after)
    if timing.kind == "once":
        return first_fire(timing, after, schedule_id) if timing.at and timing.at > after else None
    return _before_end(timing, _next_jittered(timing, after, schedule_id))


def first_fire(timing: Timing, now: datetime, schedule_id: uuid.UUID) -> datetime | None:
    """Initial cursor on create/resume/retime; a one-off keeps `at` even if it is past."""
    now = _utc("now", now)
    if timing.kind == "once":
        at = _utc("at", timing.at) if timing.at is not None else None
        if at is None or (timing.start is not None and at < timing.start):
            return None
        return _before_end(timing, at)
    return next_fire_after(timing, now, schedule_id)


def advance(timing: Timing, scheduled_for: datetime, now: datetime, schedule_id: uuid.UUID) -> Advance:
    """Decide a due cursor (scheduled_for <= now): fire the slot? and where the cursor goes.

    The next cursor is the seed's stale coalescing for every policy: the next
    fire after the slot, or, if that is already past, the first future fire.
    """
    scheduled_for, now = _utc("scheduled_for", scheduled_for), _utc("now", now)
    lateness = (now - scheduled_for).total_seconds()
    if timing.kind == "once":
        stale, following = False, None
    else:
        following = _next_jittered(timing, scheduled_for, schedule_id)
        stale = following is not None and following <= now
        if stale:
            following = _coalesce(timing, now, schedule_id)
        following = _before_end(timing, following)
    if timing.misfire == "skip":
        allowed = timing.grace if timing.grace is not None else DEFAULT_SKIP_LATENESS
        fire = not stale and lateness <= allowed
    else:
        fire = timing.grace is None or lateness <= timing.grace
    return Advance(fire=fire, next_fire_at=following)


def fire_times(timing: Timing, after: datetime, schedule_id: uuid.UUID, count: int) -> list[datetime]:
    """Up to `count` successive fires after `after` (as the cursor would visit them), for preview."""
    fires: list[datetime] = []
    cursor = next_fire_after(timing, after, schedule_id)
    while cursor is not None and len(fires) < count:
        fires.append(cursor)
        cursor = next_fire_after(timing, cursor, schedule_id)
    return fires
