"""Turn a ``job_schedules`` row into the time engine's Timing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .timeengine import Timing


def timing_from_row(row: Mapping[str, Any]) -> Timing:
    """The validated Timing of a schedule row; raises ScheduleError naming the bad field."""
    return Timing(
        kind=row["kind"],
        cron=row.get("cron_expr"),
        day_and=bool(row.get("cron_day_and")),
        every=row.get("interval_seconds"),
        at=row.get("run_at"),
        anchor=row.get("start_at") or row.get("anchor_at"),
        timezone=row.get("timezone") or "UTC",
        start=row.get("start_at"),
        end=row.get("end_at"),
        max_jitter=int(row.get("max_jitter_seconds") or 0),
        misfire=row.get("misfire_policy") or "fire_once",
        grace=row.get("misfire_grace_seconds"),
    ).validate()
