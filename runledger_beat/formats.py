"""Text forms shared by every interface: durations, instants, RFC 3339 output and plain-text tables.

One grammar each, so the API, the command line, preview and stats accept and
print the same things.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Sequence
from datetime import date, datetime, timezone
from typing import Any

from .cron import ScheduleError, zone
from .limits import MAX_JSON_DEPTH

UTC = timezone.utc
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)([wdhms])")
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}


def parse_duration(text: str, field: str = "every") -> float:
    """Seconds in '90', '1.5', '30s', '5m', '1h30m', '1d', '2w' (case and spaces ignored); else ScheduleError(field)."""
    cleaned = "".join(str(text).split()).lower()
    try:
        seconds = float(cleaned) if cleaned and cleaned[-1].isdigit() else _sum_units(cleaned)
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds) or seconds < 0:
        raise ScheduleError(field, f"invalid duration {text!r}; expected e.g. 30s, 5m, 1h30m or a number of seconds")
    return seconds


def _sum_units(text: str) -> float:
    """Sum of <number><unit> parts; ValueError unless the whole text is such parts."""
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(text)
    return sum(float(n) * _UNITS[u] for n, u in parts)


def parse_instant(field: str, value: object, tz_name: str = "UTC") -> datetime | None:
    """An aware datetime from a datetime or ISO 8601 text (a trailing Z allowed); naive values are in ``tz_name``."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise ScheduleError(field, f"invalid ISO 8601 date-time {value!r}") from None
    if not isinstance(value, datetime):
        raise ScheduleError(field, f"expected a date-time, got {value!r}")
    if value.utcoffset() is None:
        value = value.replace(tzinfo=zone(tz_name))
    return value


def format_rfc3339(dt: datetime) -> str:
    """UTC RFC 3339 with 'Z'; a fraction only when non-zero (3 digits if whole ms, else 6)."""
    if not isinstance(dt, datetime) or dt.utcoffset() is None:
        raise ScheduleError("datetime", "must be a timezone-aware datetime")
    dt = dt.astimezone(UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond % 1000 == 0 and dt.microsecond:
        text += f".{dt.microsecond // 1000:03d}"
    elif dt.microsecond:
        text += f".{dt.microsecond:06d}"
    return text + "Z"


def jsonable(value: Any, depth: int = 0) -> Any:
    """A value as JSON carries it: datetimes RFC 3339, dates ISO 8601, UUIDs and other objects as text. A value
    nested deeper than MAX_JSON_DEPTH (only raw SQL can store one) becomes a note saying so, so printing a stored
    row never exhausts Python's recursion limit."""
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        return f"<nested deeper than {MAX_JSON_DEPTH} levels>"
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # e.g. a value the database holds that is not plain JSON


def render_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, trailing blanks trimmed."""
    lines = [[str(cell) for cell in header]] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False)).rstrip() for line in lines)
