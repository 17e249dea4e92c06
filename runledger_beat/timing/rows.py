"""Turn a ``job_schedules`` row into the time engine's Timing."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any

from ..errors import ScheduleError
from .engine import Timing, fire_times


def timing_from_row(row: Mapping[str, Any]) -> Timing:
    """The validated Timing of a schedule row; raises ScheduleError naming the bad field.

    Memoised on the timing fields, so thousands of rows sharing a definition
    build and validate one Timing (errors are not cached: they re-raise).
    """
    return _timing(
        row["kind"], row.get("cron_expr"), bool(row.get("cron_day_and")), row.get("interval_seconds"),
        row.get("run_at"), row.get("start_at") or row.get("anchor_at"), row.get("timezone") or "UTC",
        row.get("start_at"), row.get("end_at"), int(row.get("max_jitter_seconds") or 0),
        row.get("misfire_policy") or "fire_once", row.get("misfire_grace_seconds"), skip_dates_of(row),
    )


def upcoming(row: Mapping[str, Any], after: datetime, count: int) -> list[datetime]:
    """Up to ``count`` fires of a schedule row after ``after``, as the cursor would visit them; [] when the row
    is paused, quarantined, finished or cannot be planned (a calendar's dates count only when the reader put
    them in ``calendar_dates``)."""
    if not row.get("is_active") or row.get("quarantined_at"):
        return []
    try:
        return fire_times(timing_from_row(row), after, uuid.UUID(str(row["id"])), count)
    except (ScheduleError, ValueError, OverflowError):
        return []


def skip_dates_of(row: Mapping[str, Any]) -> frozenset:
    """The row's own skip_dates plus its calendar's dates (``calendar_dates``, when the reader resolved them)."""
    own, shared = row.get("skip_dates"), row.get("calendar_dates")
    if not own and not shared:
        return frozenset()
    return frozenset(own or ()) | frozenset(shared or ())


@lru_cache(maxsize=8192)
def _timing(kind: str, cron: Any, day_and: bool, every: Any, at: Any, anchor: Any, timezone: str,
            start: Any, end: Any, max_jitter: int, misfire: str, grace: Any, skip_dates: frozenset) -> Timing:
    return Timing(kind=kind, cron=cron, day_and=day_and, every=every, at=at, anchor=anchor,
                  timezone=timezone, start=start, end=end, max_jitter=max_jitter,
                  misfire=misfire, grace=grace, skip_dates=skip_dates).validate()
