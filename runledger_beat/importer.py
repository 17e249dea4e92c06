"""Import a Celery ``app.conf.beat_schedule`` into job_schedules; kept at this path for existing imports.

The importers live in ``runledger_beat.imports`` (beat_schedule, django_celery_beat, redbeat).
"""

from __future__ import annotations

from .imports.beat_schedule import (
    SCHEDULE_OPTIONS,
    entry_columns,
    refused_entries,
    sync_beat_schedule,
    timing_of,
)

__all__ = ["SCHEDULE_OPTIONS", "entry_columns", "refused_entries", "sync_beat_schedule", "timing_of"]
