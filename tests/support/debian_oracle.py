"""A brute-force model of Debian (Vixie) cron, written without the engine, to judge it.

The oracle scans real time over a bounded window [start, stop) in UTC steps
(minutes for 5-field expressions, seconds for 6-field ones), converts each
instant to the zone's local wall time with zoneinfo, and applies these rules:

* A wall time matches when its minute, hour and month are in their fields and
  the day rule holds: day-of-month OR day-of-week when both fields are
  restricted (neither starts with ``*``), AND otherwise.  Day-of-month also
  takes L (last day), LW (last Monday-Friday) and nW (Monday-Friday nearest
  day n inside the month, n clamped to the month's last day); day-of-week
  takes nL (last weekday n of the month) and n#k (k-th weekday n).
* Wildcard job (5-field, minute or hour field starts with ``*``): fires at
  every scanned instant whose wall time matches, so on both passes of a
  repeated hour and never for wall times a gap skips.
* Fixed-time job (5-field, neither minute nor hour starts with ``*``): an
  instant is on the first pass when its wall time is later than every wall
  time shown earlier in the window.  The job fires at a first-pass instant
  whose wall time matches, and, when the wall clock jumps forward into an
  instant (a gap), once at that instant if any skipped wall time matches.
* 6-field expressions (seconds first): Debian cron has no seconds field; the
  rule used here is that of a wildcard job at one-second resolution: fire at
  every real second whose wall time (to the second) matches.

The minute scan assumes UTC offsets in whole minutes (true of every zone from
1970 on, so of 2025-2035); with an older offset such as Moscow's 4:31:19 the
wall minutes start mid-UTC-minute and a 60-second scan cannot see them.
Answers are exact only inside the window: a fixed-time job needs the window
to start before the first pass of any repeated hour it is asked about, and a
next fire is known only if it lies before `stop`.
"""

from __future__ import annotations

import calendar
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

UTC = timezone.utc
MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def _number(text: str, names: list[str], base: int) -> int:
    """A number or a three-letter name (names[i] is base + i)."""
    upper = text.upper()
    return names.index(upper) + base if upper in names else int(text)


def _expand(text: str, low: int, high: int, names: list[str] | None = None, base: int = 0) -> set[int]:
    """Plain cron field (lists, ranges, steps, names) -> set of values."""
    out: set[int] = set()
    for term in text.split(","):
        body, _, step = term.partition("/")
        if body in ("*", "?"):
            first, last = low, high
        elif "-" in body:
            a, b = body.split("-")
            first, last = _number(a, names or [], base), _number(b, names or [], base)
        else:
            first = _number(body, names or [], base)
            last = high if step else first
        out.update(range(first, last + 1, int(step) if step else 1))
    return out


@dataclass
class Job:
    """A parsed expression in the oracle's own terms."""

    seconds: set[int]
    minutes: set[int]
    hours: set[int]
    months: set[int]
    dom: set[int] = field(default_factory=set)
    dom_terms: list[str] = field(default_factory=list)
    dow: set[int] = field(default_factory=set)
    dow_terms: list[str] = field(default_factory=list)
    day_or: bool = False
    wildcard: bool = True


def parse(expr: str) -> Job:
    """Parse a 5- or 6-field expression (no H, no nicknames) into a Job."""
    parts = expr.split()
    six = len(parts) == 6
    if not six:
        parts = ["0", *parts]
    second, minute, hour, dom_text, month, dow_text = parts
    job = Job(_expand(second, 0, 59), _expand(minute, 0, 59), _expand(hour, 0, 23), _expand(month, 1, 12, MONTHS, 1))
    for term in dom_text.split(","):
        if term.upper() == "L" or term.upper().endswith("W"):
            job.dom_terms.append(term.upper())
        else:
            job.dom |= _expand(term, 1, 31)
    for term in dow_text.split(","):
        if "#" in term or (len(term) > 1 and term.upper().endswith("L")):
            job.dow_terms.append(term.upper())
        else:
            job.dow |= {d % 7 for d in _expand(term, 0, 7, DAYS, 0)}
    job.day_or = not dom_text.startswith(("*", "?")) and not dow_text.startswith(("*", "?"))
    job.wildcard = six or minute.startswith("*") or hour.startswith("*")
    return job


def _weekday(day: date) -> int:
    """Cron weekday: Sunday 0 ... Saturday 6."""
    return (day.weekday() + 1) % 7


def _is_workday(day: date) -> bool:
    """Monday to Friday."""
    return day.weekday() < 5


def _dom_term(term: str, day: date) -> bool:
    """Does an L, LW or nW term name this day?"""
    last = calendar.monthrange(day.year, day.month)[1]
    if term == "L":
        return day.day == last
    if term == "LW":
        candidates = [date(day.year, day.month, d) for d in range(last - 2, last + 1)]
        return day == max(c for c in candidates if _is_workday(c))
    target = min(int(term[:-1]), last)
    in_month = [d for d in (target, target - 1, target + 1, target - 2, target + 2) if 1 <= d <= last]
    for candidate in in_month:  # the day itself, else the closest workday in the month (ties: earlier)
        if _is_workday(date(day.year, day.month, candidate)):
            return day.day == candidate
    return False


def _dow_term(term: str, day: date) -> bool:
    """Does an nL or n#k term name this day?"""
    if "#" in term:
        weekday, nth = term.split("#")
        return _weekday(day) == _number(weekday, DAYS, 0) % 7 and (day.day - 1) // 7 + 1 == int(nth)
    last = calendar.monthrange(day.year, day.month)[1]
    return _weekday(day) == _number(term[:-1], DAYS, 0) % 7 and day.day + 7 > last


def day_matches(job: Job, day: date) -> bool:
    """The day rule: OR of both day fields when both are restricted, AND otherwise."""
    dom = day.day in job.dom or any(_dom_term(t, day) for t in job.dom_terms)
    dow = _weekday(day) in job.dow or any(_dow_term(t, day) for t in job.dow_terms)
    return (dom or dow) if job.day_or else (dom and dow)


def matches(job: Job, wall: datetime, day_cache: dict[date, bool]) -> bool:
    """Does a wall time (to the second) match every field?"""
    if wall.minute not in job.minutes or wall.hour not in job.hours or wall.month not in job.months:
        return False
    if wall.second not in job.seconds:
        return False
    day = wall.date()
    found = day_cache.get(day)
    if found is None:
        found = day_cache[day] = day_matches(job, day)
    return found


def timeline(zone: str, start: datetime, stop: datetime, step: int = 60) -> list[tuple[datetime, datetime]]:
    """(UTC instant, naive wall time) for each `step` seconds of [start, stop), each converted by zoneinfo."""
    tz = ZoneInfo(zone)
    count = int((stop - start).total_seconds()) // step
    instants = [start + timedelta(seconds=i * step) for i in range(count)]
    return [(t, t.astimezone(tz).replace(tzinfo=None)) for t in instants]


def _skipped(previous: datetime, current: datetime, step: timedelta) -> Iterable[datetime]:
    """Wall times strictly between two consecutive scanned walls (a gap's contents)."""
    wall = previous + step
    while wall < current:
        yield wall
        wall += step


def fires(job: Job, line: list[tuple[datetime, datetime]]) -> list[datetime]:
    """Every fire (UTC) of `job` along a scanned timeline, by the rules in the module docstring."""
    cache: dict[date, bool] = {}
    if job.wildcard:
        return [t for t, wall in line if matches(job, wall, cache)]
    out: list[datetime] = []
    step = line[1][0] - line[0][0]
    latest = line[0][1] - step  # walls shown before the window count as seen
    for t, wall in line:
        if wall > latest:
            gap = wall - latest > step
            if matches(job, wall, cache) or (gap and any(matches(job, w, cache) for w in _skipped(latest, wall, step))):
                out.append(t)
            latest = wall
    return out


def next_fire(fire_list: list[datetime], after: datetime) -> datetime | None:
    """First fire strictly after `after`, or None when the window holds none."""
    return next((t for t in fire_list if t > after), None)
