"""Cron expressions: parse once, then find the next fire strictly after an instant.

Syntax:

* 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds
  first, or an @nickname.  Day-of-week 0 and 7 are Sunday; ``?`` is ``*`` in
  the day fields.
* Day-of-month and day-of-week are OR'ed when both are restricted (neither
  starts with ``*``), AND'ed otherwise; ``day_and=True`` always ANDs (Celery).
* Day-of-month also takes ``L`` (last day), ``LW`` (last weekday, Mon-Fri) and
  ``nW`` (weekday nearest day n, never leaving the month; n past the month's
  end means its last day, as croniter reads it).  Day-of-week also takes ``nL``
  (last weekday n of the month) and ``n#k`` (k-th weekday n, k in 1-5).
* ``H`` in any field is a value chosen by hashing the schedule id, so many
  schedules sharing one expression spread out (Jenkins style): ``H`` picks one
  value of the field's range, ``H(a-b)`` one value in a-b, ``H/n`` and
  ``H(a-b)/n`` every n-th value from a hashed start below n.  The hash is
  BLAKE2b-64 of the 16 id bytes followed by the field name, modulo the number
  of choices: deterministic, so every beat computes the same fire.  ``H`` alone
  ranges over 1-28 in day-of-month (every month has those days) and 0-6 in
  day-of-week.  Without an id the nil UUID is used (validation only).

Time zones follow Debian (Vixie) cron.  A 5-field job whose minute and hour
fields do not start with ``*`` is a fixed-time job; every other job (including
all 6-field jobs) is a wildcard job:

* A wildcard job fires at every real instant whose local wall time matches:
  both passes of a repeated hour, nothing for wall times a gap skips.
* A fixed-time job fires at the first real instant showing a matching wall
  time (the first pass of a repeated hour only), and once at the end of a
  skipped gap whose wall times held at least one match.

Search bounds: a next-fire computation looks at most SEARCH_YEARS years of
calendar ahead and, near UTC-offset changes, at most MAX_WINDOWS exact windows
of WINDOW seconds; past either bound it answers None.  Pure computation, no I/O.
"""

from __future__ import annotations

import calendar
import hashlib
import re
import uuid
from bisect import bisect_left, bisect_right
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..errors import ScheduleError

UTC = timezone.utc
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NAIVE_EPOCH = datetime(1970, 1, 1)
ONE_SECOND = timedelta(seconds=1)
SEARCH_YEARS = 400  # one full Gregorian cycle: any calendar pattern that can match does so within it
MAX_YEAR = 9998
SLACK = 86400  # seconds of offset stability required around the fast path
MAX_OFFSET = 86400  # |UTC offset| is below 24 h for every tzinfo (Python enforces it)
WINDOW = 2 * MAX_OFFSET + 7200  # exact-window length: holds every instant of a wall time near its start
PROBE = 6 * 3600  # offset probing step (as for the yearly table): transitions are further apart
MAX_WINDOWS = 8 * SEARCH_YEARS + 16  # exact windows per search: only a gap can make one come up empty
NIL = uuid.UUID(int=0)

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
FIELDS: list[tuple[str, int, int]] = [
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
]
# H without a range: every field's full range, except 1-28 for a bare H in day-of-month and 0-6 in day-of-week.
HASH_RANGES = {f[0]: (f[1], f[2]) for f in FIELDS} | {"day-of-month": (1, 28), "day-of-week": (0, 6)}
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
MONTH_NAMES = {n: i + 1 for i, n in enumerate(MONTHS)}
DAY_NAMES = {n: i for i, n in enumerate(["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"])}
MAX_DAYS_IN_MONTH = [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
HASH_TERM = re.compile(r"H(?:\((?P<range>[^)]*)\))?(?:/(?P<step>.*))?", re.IGNORECASE)
USES_HASH = re.compile(r"(?:^|[\s,])H", re.IGNORECASE)


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


def _step(text: str, name: str) -> int:
    """The number after '/', at least 1."""
    if not text.isdigit() or not text.isascii():
        raise ScheduleError("cron", f"{name}: step {text!r} is not a number")
    step = int(text)
    if step < 1:
        raise ScheduleError("cron", f"{name}: step must be at least 1, got {step}")
    return step


def _range(text: str, name: str, low: int, high: int) -> tuple[int, int]:
    """'a-b' -> (a, b), both in range and not backwards."""
    first, dash, last = text.partition("-")
    if not dash:
        raise ScheduleError("cron", f"{name}: {text!r} is not a range a-b")
    start, end = _value(first, name, low, high), _value(last, name, low, high)
    if end < start:
        raise ScheduleError("cron", f"{name}: range {first}-{last} is backwards")
    return start, end


def hash_choice(hash_id: uuid.UUID, name: str, size: int) -> int:
    """Deterministic 0 <= k < size from the schedule id and field name (BLAKE2b-64, big-endian)."""
    digest = hashlib.blake2b(hash_id.bytes + name.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % size


def _hash_term(term: str, name: str, low: int, high: int, hash_id: uuid.UUID) -> range:
    """Expand an H, H(a-b), H/n or H(a-b)/n term for `hash_id`."""
    match = HASH_TERM.fullmatch(term)
    if match is None:
        raise ScheduleError("cron", f"{name}: {term!r} is not an H form (H, H(a-b), H/n or H(a-b)/n)")
    if match["range"] is not None:
        start, end = _range(match["range"], name, low, high)
    else:
        start, end = HASH_RANGES[name] if match["step"] is None or name == "day-of-week" else (low, high)
    if match["step"] is None:
        return range(start + hash_choice(hash_id, name, end - start + 1), end + 1, end - start + 1)
    step = _step(match["step"], name)
    return range(start + hash_choice(hash_id, name, min(step, end - start + 1)), end + 1, step)


def _plain_term(term: str, name: str, low: int, high: int) -> range:
    """Expand a number, name, range or '*', with an optional '/step'."""
    base, slash, step_text = term.partition("/")
    step = _step(step_text, name) if slash else 1
    if base == "*":
        start, end = low, high
    elif "-" in base:
        start, end = _range(base, name, low, high)
    else:
        start = _value(base, name, low, high)
        end = high if slash else start  # "a/n" means a, a+n, ... up to the top
    return range(start, end + 1, step)


def _dom_special(term: str) -> tuple[str, int] | None:
    """L, LW or nW in day-of-month -> ("L", 0), ("LW", 0), ("W", n); None for other terms."""
    upper = term.upper()
    if upper in ("L", "LW"):
        return upper, 0
    if upper.endswith("W"):
        return "W", _value(upper[:-1], "day-of-month", 1, 31)
    return None


def _dow_special(term: str) -> tuple[str, int, int] | None:
    """nL or n#k in day-of-week -> ("L", n, 0), ("#", n, k); None for other terms."""
    upper = term.upper()
    if "#" in upper:
        day, _, nth = upper.partition("#")
        k = int(nth) if nth.isdigit() and nth.isascii() else -1
        if not 1 <= k <= 5:
            raise ScheduleError("cron", f"day-of-week: #{nth} is not a week number 1-5")
        return "#", _value(day, "day-of-week", 0, 7) % 7, k
    if len(upper) > 1 and upper.endswith("L"):
        return "L", _value(upper[:-1], "day-of-week", 0, 7) % 7, 0
    return None


def _parse_field(text: str, name: str, low: int, high: int, hash_id: uuid.UUID = NIL) -> tuple[set[int], list]:
    """Expand one field into (set of values, day specials such as L, W, # terms)."""
    values: set[int] = set()
    specials: list = []
    for term in text.split(","):
        special = (
            _dom_special(term) if name == "day-of-month" else _dow_special(term) if name == "day-of-week" else None
        )
        if special is not None:
            specials.append(special)
        elif term[:1] in ("H", "h"):
            values.update(_hash_term(term, name, low, high, hash_id))
        else:
            values.update(_plain_term(term, name, low, high))
    return values, specials


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


def uses_hash(expr: str) -> bool:
    """True when some term of `expr` is an H form (its fires depend on the schedule id)."""
    return isinstance(expr, str) and USES_HASH.search(expr) is not None


# ---------------------------------------------------------------------------
# Calendar helpers


def _last_weekday(year: int, month: int) -> int:
    """Day number of the month's last Monday-Friday."""
    last = calendar.monthrange(year, month)[1]
    weekday = calendar.weekday(year, month, last)  # Monday = 0
    return last - max(0, weekday - 4)


def _nearest_weekday(year: int, month: int, day: int) -> int:
    """Quartz 'nW': the Monday-Friday nearest `day` without leaving the month (day clamped to its end)."""
    last = calendar.monthrange(year, month)[1]
    day = min(day, last)
    weekday = calendar.weekday(year, month, day)
    if weekday == 5:  # Saturday: Friday before, or Monday after at the month's start
        return day - 1 if day > 1 else day + 2
    if weekday == 6:  # Sunday: Monday after, or Friday before at the month's end
        return day + 1 if day < last else day - 2
    return day


def _dom_special_day(special: tuple[str, int], year: int, month: int) -> int:
    """The day of (year, month) an L / LW / nW term names."""
    kind, n = special
    if kind == "L":
        return calendar.monthrange(year, month)[1]
    if kind == "LW":
        return _last_weekday(year, month)
    return _nearest_weekday(year, month, n)


def _dow_special_day(special: tuple[str, int, int], year: int, month: int) -> int | None:
    """The day of (year, month) an nL / n#k term names, or None (no 5th such weekday)."""
    kind, dow, k = special
    last = calendar.monthrange(year, month)[1]
    if kind == "L":
        last_dow = (calendar.weekday(year, month, last) + 1) % 7  # Sunday = 0
        return last - (last_dow - dow) % 7
    first_dow = (calendar.weekday(year, month, 1) + 1) % 7
    day = 1 + (dow - first_dow) % 7 + 7 * (k - 1)
    return day if day <= last else None


# ---------------------------------------------------------------------------
# UTC-offset periods (to know when wall-clock arithmetic is exact)


def _offset_at(tz: ZoneInfo, ts: int) -> int:
    """UTC offset in seconds of `tz` at Unix time `ts`."""
    return int(datetime.fromtimestamp(ts, tz).utcoffset().total_seconds())  # type: ignore[union-attr]


def _bisect_change(tz: ZoneInfo, lo: int, hi: int, before: int) -> int:
    """First second in (lo, hi] whose offset differs from `before` (offset(lo) == before != offset(hi))."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(tz, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _changes(tz: ZoneInfo, start: int, stop: int, step: int) -> list[tuple[int, int, int]]:
    """(instant, offset before, offset after) of each offset change in (start, stop], probing every `step` s."""
    found = []
    ts, previous = start, _offset_at(tz, start)
    while ts < stop:
        nxt = min(ts + step, stop)
        offset = _offset_at(tz, nxt)
        if offset != previous:
            found.append((_bisect_change(tz, ts, nxt, previous), previous, offset))
            previous = offset
        ts = nxt
    return found


@lru_cache(maxsize=4096)
def _year_changes(tz: ZoneInfo, year: int) -> tuple[tuple[int, int, int], ...]:
    """(instant, offset before, offset after) of each offset change of `tz` in `year` (PROBE + bisection)."""
    start = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    stop = int(datetime(year + 1, 1, 1, tzinfo=UTC).timestamp())
    return tuple(c for c in _changes(tz, start - 1, stop, PROBE) if start <= c[0] < stop)


def _transitions(tz: ZoneInfo, year: int) -> tuple[int, ...]:
    """Unix times in `year` at which the offset of `tz` changes."""
    return tuple(t for t, _, _ in _year_changes(tz, year))


def _window_changes(tz: ZoneInfo, start: int, stop: int) -> list[tuple[int, int, int]]:
    """The offset changes in (start, stop], from the yearly tables (probed afresh at the calendar's far ends)."""
    first, last = datetime.fromtimestamp(start, UTC).year, datetime.fromtimestamp(stop, UTC).year
    if first < 3 or last > MAX_YEAR - 2:
        return _changes(tz, start, stop, PROBE)
    return [c for year in range(first, last + 1) for c in _year_changes(tz, year) if start < c[0] <= stop]


def _period(tz: ZoneInfo, ts: int) -> tuple[int, int, int]:
    """(low, high, offset): `tz` keeps `offset` on [low, high) around `ts` (bounds may be conservative)."""
    year = datetime.fromtimestamp(ts, UTC).year
    if not 3 <= year <= MAX_YEAR - 2:
        return ts, ts, _offset_at(tz, ts)  # empty period: always take the exact search
    changes = [c for y in (year - 1, year, year + 1) for c in _transitions(tz, y)]
    i = bisect_right(changes, ts)
    low = changes[i - 1] if i else int(datetime(year - 1, 1, 1, tzinfo=UTC).timestamp())
    high = changes[i] if i < len(changes) else int(datetime(year + 2, 1, 1, tzinfo=UTC).timestamp())
    return low, high, _offset_at(tz, ts)


def _periods(tz: ZoneInfo, start: int, stop: int) -> list[tuple[int, int, int, int | None]]:
    """Stable-offset pieces (begin, end, offset, offset before begin or None) covering [start, stop)."""
    pieces = []
    begin, before, offset = start, None, _offset_at(tz, start)
    for instant, previous, after in _window_changes(tz, start, stop - 1):
        pieces.append((begin, instant, offset, before))
        begin, before, offset = instant, previous, after
    pieces.append((begin, stop, offset, before))
    return pieces


def _naive_ts(dt: datetime) -> int:
    """Whole seconds of a naive wall-clock datetime since the naive epoch."""
    return (dt - NAIVE_EPOCH) // ONE_SECOND


def _naive(seconds: int) -> datetime:
    """Naive wall-clock datetime `seconds` after the naive epoch."""
    return NAIVE_EPOCH + timedelta(seconds=seconds)


# ---------------------------------------------------------------------------
# The evaluator


class Cron:
    """A compiled cron expression bound to a time zone; see the module docstring."""

    def __init__(
        self, expr: str, timezone: str = "UTC", day_and: bool = False, hash_id: uuid.UUID | None = None
    ) -> None:
        self.expr = expr
        self.timezone = timezone
        self.hash_id = hash_id
        parts = _split(expr)
        parsed = [_parse_field(p, *spec, hash_id or NIL) for p, spec in zip(parts, FIELDS, strict=True)]
        sets = [values for values, _ in parsed]
        self.seconds, self.minutes, self.hours = (tuple(sorted(s)) for s in sets[:3])
        self.days_of_month = frozenset(sets[3])
        self.months = tuple(sorted(sets[4]))
        self.days_of_week = frozenset(d % 7 for d in sets[5])
        self.dom_specials, self.dow_specials = tuple(parsed[3][1]), tuple(parsed[5][1])
        # Vixie cron: a day field starting with '*' turns OR into AND.
        self.day_and = day_and or parts[3].startswith("*") or parts[5].startswith("*")
        if self.day_and and not self.dom_specials and not any(
            d <= MAX_DAYS_IN_MONTH[m] for m in self.months for d in sets[3]
        ):
            raise ScheduleError("cron", f"{expr.strip()} can never fire")
        self.tz = zone(timezone)
        self.fixed = timezone.upper() in FIXED_ZONES or timezone.startswith("Etc/GMT")
        # 5-field jobs whose minute and hour do not start with '*' are fixed-time jobs (Debian cron).
        five_fields = len(_split_count(expr)) == 5
        self.wall_clock = five_fields and not parts[1].startswith("*") and not parts[2].startswith("*")
        self._period = (0, 0, 0)  # last stable-offset period seen (low, high, offset)
        self._month_days: dict[tuple[int, int], tuple[int, ...]] = {}
        self.next_after = lru_cache(maxsize=2048)(self._next_after)  # type: ignore[method-assign]

    def __repr__(self) -> str:
        return f"Cron({self.expr!r}, timezone={self.timezone!r}, day_and={self.day_and})"

    # -- calendar matching ---------------------------------------------------

    def _dom_days(self, year: int, month: int, last: int) -> set[int]:
        """Days of the month the day-of-month field names."""
        days = {d for d in self.days_of_month if d <= last}
        days.update(_dom_special_day(s, year, month) for s in self.dom_specials)
        return days

    def _dow_days(self, year: int, month: int, last: int) -> set[int]:
        """Days of the month the day-of-week field names."""
        first_dow = (calendar.weekday(year, month, 1) + 1) % 7  # Sunday = 0
        days = {d for d in range(1, last + 1) if (first_dow + d - 1) % 7 in self.days_of_week}
        days.update(d for s in self.dow_specials if (d := _dow_special_day(s, year, month)) is not None)
        return days

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        """Matching days of one month (OR/AND rule applied), memoized."""
        key = (year, month)
        days = self._month_days.get(key)
        if days is None:
            last = calendar.monthrange(year, month)[1]
            dom, dow = self._dom_days(year, month, last), self._dow_days(year, month, last)
            days = tuple(sorted(dom & dow if self.day_and else dom | dow))
            if len(self._month_days) > 2000:
                self._month_days.clear()
            self._month_days[key] = days
        return days

    def _first_match(self, dt: datetime) -> datetime | None:
        """First naive wall-clock time >= dt matching every field, within SEARCH_YEARS years; else None."""
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

    def _match_between(self, low: int, high: int) -> bool:
        """Does some wall time in [low, high) (naive seconds) match?"""
        found = self._first_match(_naive(low))
        return found is not None and _naive_ts(found) < high

    # -- next fire -----------------------------------------------------------

    def _next_after(self, t: datetime) -> datetime | None:
        """First fire strictly after the aware instant `t`, as an aware UTC datetime."""
        if t.utcoffset() is None:
            raise ScheduleError("after", "must be timezone-aware")
        try:
            found = self._search((t - EPOCH) // ONE_SECOND)
        except (OverflowError, ValueError):  # the search ran past year 9999 or before year 1
            return None
        return None if found is None else EPOCH + timedelta(seconds=found)

    def _search(self, ts: int) -> int | None:
        """next_after on whole Unix seconds: plain wall-clock arithmetic when the offset is stable."""
        low, high, offset = self._period
        if not low <= ts - SLACK < high:
            low, high, offset = self._period = _period(self.tz, ts)
        found = self._first_match(NAIVE_EPOCH + timedelta(seconds=ts + offset + 1))
        if found is None:
            return None
        result = (found - NAIVE_EPOCH) // ONE_SECOND - offset
        if self.fixed or (low <= ts - SLACK and result + SLACK < high):
            return result
        return self._exact(ts)

    def _exact(self, ts: int) -> int | None:
        """Exact search near offset changes: jump to the next wall-clock match, then scan a window around it.

        No instant in (ts, n - MAX_OFFSET) can show a wall time >= n, so starting
        the window there loses nothing; a window holds every instant of the
        match's wall time, so only a gap can leave it empty.  Bounded by
        SEARCH_YEARS of calendar and MAX_WINDOWS windows.
        """
        horizon = ts + SEARCH_YEARS * 366 * 86400
        for _ in range(MAX_WINDOWS):
            found = self._first_match(_naive(ts + 1 - MAX_OFFSET))
            if found is None:
                return None
            start = max(ts, _naive_ts(found) - MAX_OFFSET - 1)
            if start > horizon:
                return None
            fire = self._scan(start, start + WINDOW)
            if fire is not None:
                return fire
            ts = start + WINDOW
        return None

    def _scan(self, start: int, stop: int) -> int | None:
        """First fire in (start, stop], walking the window's stable-offset pieces in order."""
        for begin, end, offset, before in _periods(self.tz, start - MAX_OFFSET, stop + 1):
            if end <= start + 1:
                continue
            low = max(begin, start + 1)
            if self.wall_clock and before is not None:
                if before < offset and begin > start and self._match_between(begin + before, begin + offset):
                    return begin  # fixed-time job: once, right after a gap that held a match
                low = max(low, begin + before - offset)  # fixed-time job: skip the second pass
            found = self._first_match(_naive(low + offset))
            if found is not None and _naive_ts(found) - offset < end:
                return _naive_ts(found) - offset
        return None


def _split_count(expr: str) -> list[str]:
    """Fields as written (nicknames expanded), to tell 5-field from 6-field forms."""
    text = expr.strip()
    return NICKNAMES.get(text.lower(), text).split()


_PLAIN: dict[tuple[str, str, bool], Cron] = {}  # expressions without H: one Cron whatever the id
PLAIN_CACHE_SIZE = 1024


def compile_cron(expr: str, timezone: str = "UTC", day_and: bool = False, hash_id: uuid.UUID | None = None) -> Cron:
    """Parse `expr` once per (expression, zone, day rule[, id when it uses H]); raises ScheduleError.

    `hash_id` is the schedule id H terms hash; it is ignored (and not part of
    the cache key) for expressions without H, and defaults to the nil UUID.
    """
    cron = _PLAIN.get((expr, timezone, day_and))
    if cron is not None:
        return cron
    if not isinstance(expr, str):
        raise ScheduleError("cron", "must be a string")
    if uses_hash(expr):
        return _compile_hashed(expr, timezone, day_and, hash_id or NIL)
    cron = Cron(expr, timezone, day_and)
    if len(_PLAIN) >= PLAIN_CACHE_SIZE:
        _PLAIN.clear()
    _PLAIN[(expr, timezone, day_and)] = cron
    return cron


@lru_cache(maxsize=16384)
def _compile_hashed(expr: str, timezone: str, day_and: bool, hash_id: uuid.UUID) -> Cron:
    """The cached Cron of an H expression for one schedule id."""
    return Cron(expr, timezone, day_and, hash_id)


def _cache_clear() -> None:
    """Forget every compiled expression."""
    _PLAIN.clear()
    _compile_hashed.cache_clear()


compile_cron.cache_clear = _cache_clear  # type: ignore[attr-defined]
