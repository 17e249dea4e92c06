"""A Celery app whose beat_schedule holds entries Celery accepts and two runledger refuses (solar, a custom
BaseSchedule subclass), for the sync and doctor tests."""

from __future__ import annotations

from celery import Celery
from celery.schedules import BaseSchedule, crontab, solar


class EveryFullMoon(BaseSchedule):
    """A custom schedule: nothing runledger could store."""

    def is_due(self, last_run_at):
        return False, 3600.0


def _solar():
    try:
        return solar("sunrise", 52.5, 13.4)
    except Exception:  # ephem is not installed; the importer never needs it
        return object.__new__(solar)


app = Celery("refused", broker="memory://", set_as_current=False)
app.conf.timezone = "Europe/Paris"
app.conf.beat_schedule = {
    "weekly": {"task": "t.weekly", "schedule": crontab(minute=0, hour=7, day_of_week="monday")},
    "spread": {"task": "t.spread", "schedule": crontab(minute=[0], day_of_week="tuesday-sunday")},
    "sunrise": {"task": "t.sun", "schedule": _solar()},
    "moon": {"task": "t.moon", "schedule": EveryFullMoon()},
}
