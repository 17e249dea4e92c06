"""Cron expressions: parse once, then find the next fire strictly after an instant.

Semantics follow Debian (Vixie) cron as implemented by ``cronsim``:

* 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds
  first, or an @nickname.  Day-of-week 0 and 7 are Sunday.
* Day-of-month and day-of-week are OR'ed when both are restricted (neither
  starts with ``*``), AND'ed otherwise; ``day_and=True`` always ANDs (Celery).
* A 5-field job whose minute and hour are both pinned ("wall-clock job") runs
  on the local wall clock: inside a skipped hour it fires once right after the
  gap, inside a repeated hour it fires once (first occurrence).  Every other
  job follows real elapsed time.

Pure computation, no I/O.  The hot path works on naive wall-clock datetimes
and is exact whenever no UTC-offset change is nearby; near a change the
real-time walk mirrors cronsim step by step, so its quirks are reproduced.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left, bisect_right
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)
ONE_SECOND = timedelta(seconds=1)
ONE_MINUTE = timedelta(minutes=1)
SEARCH_YEARS = 400  # no valid expression needs longer (Feb 29 on a given weekday)
MAX_YEAR = 9998
SLACK = 86400  # seconds of offset stability required around the fast path

FIXED_ZONES = {"UTC", "ETC/UTC", "UCT", "ETC/UCT", "GMT", "ETC/GMT", "ZULU", "ETC/ZULU", "UNIVERSAL", "ETC/UNIVERSAL"}
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, low, high) in 6-field order: seconds first.
FIELDS = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
]
MONTH_NAMES = {n: i + 1 for i, n in enumerate(["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"])}
DAY_NAMES = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
MAX_DAYS_IN_MONTH = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


class ScheduleError(ValueError):
    """Invalid schedule input; names the field and a human reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@lru_cache(maxsize=256)
def zone(name: str) -> ZoneInfo:
    """Look up an IANA zone, turning every failure into a "timezone" ScheduleError."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ScheduleError("timezone", f"unknown time zone {name!r}") from None


# ---------------------------------------------------------------------------
# Parsing


def _value(text: str, name: str, low: int, high: int) -> int:
    """One number or (for month/day-of-week) a three-letter name, range-checked."""
    names = MONTH_NAMES if name == "month" else DAY_NAMES if name == "day-of-week" else {}
    if text.upper() in names:
        return names[text.upper()]
    if not text.isdigit() or not text.isascii():
        raise ScheduleError("cron", f"{name}: {text!r} is not a number")
    value = int(text)
    if not low <= value <= high:
        raise ScheduleError("cron", f"{name}: {value} is out of range {low}-{high}")
    return value


def _parse_field(text: str, name: str, low: int, high: int) -> set[int]:
    """Expand one field (lists, ranges, steps, names) into its set of values."""
    values: set[int] = set()
    for term in text.split(","):
        base, slash, step_text = term.partition("/")
        step = 1
        if slash:
            if not step_text.isdigit() or not step_text.isascii():
                raise ScheduleError("cron", f"{name}: step {step_text!r} is not a number")
            step = int(step_text)
            if step < 1:
                raise ScheduleError("cron", f"{name}: step must be at least 1, got {step}")
        if base == "*":
            start, end = low, high
        elif "-" in base:
            first, last = base.split("-", 1)
            start, end = _value(first, name, low, high), _value(last, name, low, high)
            if end < start:
                raise ScheduleError("cron", f"{name}: range {first}-{last} is backwards")
        else:
            start = _value(base, name, low, high)
            end = high if slash else start  # "a/n" means a, a+n, ... up to the top
        values.update(range(start, end + 1, step))
    return values


def _split(expr: str) -> list[str]:
    """Expand nicknames and return the 6 fields (seconds first)."""
    text = expr.strip()
    if text.startswith("@"):
        if text.lower() not in NICKNAMES:
            raise ScheduleError("cron", f"unknown nickname {text!r}")
        text = NICKNAMES[text.lower()]
    parts = text.split()
    if len(parts) == 5:
        parts.insert(0, "0")
    elif len(parts) != 6:
        raise ScheduleError("cron", f"expected 5 or 6 fields, got {len(parts)}")
    for i in (3, 5):  # '?' is '*' in the day fields (Quartz/Celery habit)
        if parts[i].startswith("?"):
            parts[i] = "*" + parts[i][1:]
    return parts


# ---------------------------------------------------------------------------
# UTC-offset periods (to know when wall-clock arithmetic is exact)


def _offset_at(tz: ZoneInfo, ts: int) -> int:
    """UTC offset in seconds of `tz` at Unix time `ts`."""
    return int(datetime.fromtimestamp(ts, tz).utcoffset().total_seconds())  # type: ignore[union-attr]


@lru_cache(maxsize=4096)
def _transitions(tz: ZoneInfo, year: int) -> tuple[int, ...]:
    """Unix times in `year` at which the offset of `tz` changes (6-hourly probe + bisection)."""
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    stop = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    found = []
    step = 6 * 3600
    previous = _offset_at(tz, start - 1)
    ts = start - 1
    while ts < stop:
        nxt = min(ts + step, stop)
        offset = _offset_at(tz, nxt)
        if offset != previous:
            lo, hi = ts, nxt  # offset(lo) == previous, offset(hi) != previous
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset_at(tz, mid) == previous:
                    lo = mid
                else:
                    hi = mid
            if start <= hi < stop:
                found.append(hi)
            previous = offset
        ts = nxt
    return tuple(found)


def _period(tz: ZoneInfo, ts: int) -> tuple[int, int, int]:
    """(low, high, offset): `tz` keeps `offset` on [low, high) around `ts` (bounds may be conservative)."""
    year = datetime.fromtimestamp(ts, UTC).year
    if not 2 <= year <= MAX_YEAR - 2:
        return ts, ts, _offset_at(tz, ts)  # empty period: always take the careful walk
    changes = [c for y in (year - 1, year, year + 1) for c in _transitions(tz, y)]
    i = bisect_right(changes, ts)
    low = changes[i - 1] if i else int(datetime(year - 1, 1, 1, tzinfo=UTC).timestamp())
    high = changes[i] if i < len(changes) else int(datetime(year + 2, 1, 1, tzinfo=UTC).timestamp())
    return low, high, _offset_at(tz, ts)


def _to_ts(dt: datetime) -> int:
    """Whole Unix seconds (floor) of an aware datetime."""
    return (dt - EPOCH) // ONE_SECOND


def _naive_ts(dt: datetime) -> int:
    """Whole seconds of a naive wall-clock datetime since the naive epoch."""
    return (dt - NAIVE_EPOCH) // ONE_SECOND


def _is_imaginary(local: datetime) -> bool:
    """cronsim's test: the wall time does not survive a round trip through UTC."""
    return local != local.astimezone(UTC).astimezone(local.tzinfo)


# ---------------------------------------------------------------------------
# The evaluator


class Cron:
    """A compiled cron expression bound to a time zone; see the module docstring."""

    def __init__(self, expr: str, timezone: str = "UTC", day_and: bool = False) -> None:
        self.expr = expr
        self.timezone = timezone
        parts = _split(expr)
        sets = [_parse_field(p, *spec) for p, spec in zip(parts, FIELDS)]
        self.seconds, self.minutes, self.hours = (tuple(sorted(s)) for s in sets[:3])
        self.days_of_month = frozenset(sets[3])
        self.months = tuple(sorted(sets[4]))
        self.days_of_week = frozenset(d % 7 for d in sets[5])
        self.second_set, self.minute_set, self.hour_set = (frozenset(s) for s in sets[:3])
        self.month_set = frozenset(sets[4])
        # Vixie cron: a day field starting with '*' turns OR into AND.
        self.day_and = day_and or parts[3].startswith("*") or parts[5].startswith("*")
        if self.day_and and not any(d <= MAX_DAYS_IN_MONTH[m] for m in self.months for d in sets[3]):
            raise ScheduleError("cron", f"{expr.strip()} can never fire")
        self.tz = zone(timezone)
        self.fixed = timezone.upper() in FIXED_ZONES or timezone.startswith("Etc/GMT")
        # 5-field jobs with pinned minute and hour run on the wall clock (Debian cron).
        five_fields = len(_split_count(expr)) == 5
        self.wall_clock = five_fields and not parts[1].startswith("*") and not parts[2].startswith("*")
        self._period = (0, 0, 0)  # last stable-offset period seen (low, high, offset)
        self._month_days: dict[tuple[int, int], tuple[int, ...]] = {}
        self.next_after = lru_cache(maxsize=2048)(self._next_after)  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"Cron({self.expr!r}, timezone={self.timezone!r}, day_and={self.day_and})"

    # -- calendar matching ---------------------------------------------------

    def _day_matches(self, d: date) -> bool:
        """Day-of-month / day-of-week test with the OR/AND rule."""
        dom = d.day in self.days_of_month
        dow = (d.weekday() + 1) % 7 in self.days_of_week
        return (dom and dow) if self.day_and else (dom or dow)

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        """Matching days of one month, memoized."""
        key = (year, month)
        days = self._month_days.get(key)
        if days is None:
            count = calendar.monthrange(year, month)[1]
            days = tuple(d for d in range(1, count + 1) if self._day_matches(date(year, month, d)))
            if len(self._month_days) > 2000:
                self._month_days.clear()
            self._month_days[key] = days
        return days

    def _first_match(self, dt: datetime) -> datetime | None:
        """First naive wall-clock time >= dt matching every field (no time zone involved)."""
        y, mo, d, h, mi, s = dt.year, dt.month, dt.day, dt.hour, dt.minute, dt.second
        months, hours, minutes, seconds = self.months, self.hours, self.minutes, self.seconds
        limit = min(y + SEARCH_YEARS, MAX_YEAR)
        while y <= limit:
            i = bisect_left(months, mo)
            if i == len(months):
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
                continue
            if months[i] != mo:
                mo, d, h, mi, s = months[i], 1, 0, 0, 0
            days = self._days(y, mo)
            i = bisect_left(days, d)
            if i == len(days):
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
                continue
            if days[i] != d:
                d, h, mi, s = days[i], 0, 0, 0
            i = bisect_left(hours, h)
            if i == len(hours):
                d, h, mi, s = d + 1, 0, 0, 0
                continue
            if hours[i] != h:
                h, mi, s = hours[i], 0, 0
            i = bisect_left(minutes, mi)
            if i == len(minutes):
                h, mi, s = h + 1, 0, 0
                continue
            if minutes[i] != mi:
                mi, s = minutes[i], 0
            i = bisect_left(seconds, s)
            if i == len(seconds):
                mi, s = mi + 1, 0
                continue
            return datetime(y, mo, d, h, mi, seconds[i])
        return None

    # -- next fire -----------------------------------------------------------

    def _next_after(self, t: datetime) -> datetime | None:
        """First fire strictly after the aware instant `t`, as an aware UTC datetime."""
        if t.utcoffset() is None:
            raise ScheduleError("after", "must be timezone-aware")
        try:
            return self._search(_to_ts(t), t)
        except OverflowError:  # the search ran past year 9999
            return None

    def _search(self, ts: int, t: datetime) -> datetime | None:
        """next_after on whole Unix seconds `ts` (`t` is the same instant, for its wall time)."""
        if self.wall_clock and not self.fixed:
            return self._next_wall_clock(t.astimezone(self.tz).replace(tzinfo=None), ts)
        # Fast path: wall time = UTC + constant offset around the whole search.
        low, high, offset = self._period
        if not low <= ts - SLACK < high:
            low, high, offset = self._period = _period(self.tz, ts)
        found = self._first_match(NAIVE_EPOCH + timedelta(seconds=ts + offset + 1))
        if found is None:
            return None
        result = _naive_ts(found) - offset
        if self.fixed or (low <= ts - SLACK and result + SLACK < high):
            return EPOCH + timedelta(seconds=result)
        return self._walk_real_time(ts)

    def _next_wall_clock(self, local: datetime, ts: int) -> datetime | None:
        """Wall-clock job: naive search, then cronsim's fix-up of skipped times."""
        start = local.replace(microsecond=0) + ONE_SECOND
        while True:
            found = self._first_match(start)
            if found is None:
                return None
            aware = found.replace(tzinfo=self.tz)  # fold=0: first occurrence
            while _is_imaginary(aware):  # inside a gap: first valid minute after it
                found += ONE_MINUTE
                aware = found.replace(tzinfo=self.tz)
            result = aware.astimezone(UTC)
            if _to_ts(result) > ts:
                return result
            start = found + ONE_SECOND  # already passed (second occurrence of the hour)

    def _walk_real_time(self, ts: int) -> datetime | None:
        """cronsim's forward walk on aware local time; used only near offset changes."""
        tz = self.tz

        def tick(dt: datetime, seconds: int) -> datetime:
            return (dt.astimezone(UTC) + timedelta(seconds=seconds)).astimezone(tz)

        dt = datetime.fromtimestamp(ts + 1, tz)
        start_year = dt.year
        while True:
            if dt.month not in self.month_set:
                day = dt.date()
                while day.month not in self.month_set:
                    day = (day.replace(day=1) + timedelta(days=32)).replace(day=1)
                dt = datetime.combine(day, time(), tzinfo=tz)
            if dt.year > min(start_year + SEARCH_YEARS, MAX_YEAR):
                return None
            day = dt.date()
            if not self._day_matches(day):
                while not self._day_matches(day):
                    day += timedelta(days=1)
                    if day.day == 1:
                        break
                dt = datetime.combine(day, time(), tzinfo=tz)
                continue
            if dt.hour not in self.hour_set:
                dt = dt.replace(minute=0, second=0)
                while dt.hour not in self.hour_set:
                    dt = tick(dt, 3600)
                    if dt.hour == 0:
                        break
                continue
            if dt.minute not in self.minute_set:
                dt = dt.replace(second=0)
                if len(self.minutes) == 1:
                    dt = tick(dt, (self.minutes[0] - dt.minute) % 60 * 60)
                while dt.minute not in self.minute_set:
                    dt = tick(dt, 60)
                    if dt.minute == 0:
                        break
                continue
            if dt.second not in self.second_set:
                if len(self.seconds) == 1:
                    dt = tick(dt, (self.seconds[0] - dt.second) % 60)
                while dt.second not in self.second_set:
                    dt = tick(dt, 1)
                    if dt.second == 0:
                        break
                continue
            result = dt.astimezone(UTC)
            if _to_ts(result) > ts:
                return result
            dt = tick(dt, 1)


def _split_count(expr: str) -> list[str]:
    """Fields as written (nicknames expanded), to tell 5-field from 6-field forms."""
    text = expr.strip()
    return NICKNAMES.get(text.lower(), text).split()


@lru_cache(maxsize=1024)
def compile_cron(expr: str, timezone: str = "UTC", day_and: bool = False) -> Cron:
    """Parse `expr` once per (expression, zone, day rule); raises ScheduleError."""
    if not isinstance(expr, str):
        raise ScheduleError("cron", "must be a string")
    return Cron(expr, timezone, day_and)
