"""A Celery app whose beat_schedule holds entries Celery accepts and two runledger refuses (solar, a custom
BaseSchedule subclass), for the sync, doctor and beat start tests (a real beat takes RUNLEDGER_DSN and
RL_SCHEMA from the environment; its broker is in-memory, so nothing it sends leaves the process)."""

from __future__ import annotations

import os

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
app.conf.update(timezone="Europe/Paris", runledger_dsn=os.environ.get("RUNLEDGER_DSN"),
                runledger_schema=os.environ.get("RL_SCHEMA", "runledger"), beat_max_loop_interval=5)
app.conf.beat_schedule = {
    "weekly": {"task": "t.weekly", "schedule": crontab(minute=0, hour=7, day_of_week="monday")},
    "spread": {"task": "t.spread", "schedule": crontab(minute=[0], day_of_week="tuesday-sunday")},
    "sunrise": {"task": "t.sun", "schedule": _solar()},
    "moon": {"task": "t.moon", "schedule": EveryFullMoon()},
}
