"""Text forms shared by every interface: durations, instants, RFC 3339 output and plain-text tables.

One grammar each, so the API, the command line, preview and stats accept and
print the same things.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timezone

from ..errors import ScheduleError
from .cron import zone

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


