"""Import a Celery ``app.conf.beat_schedule`` into job_schedules (rows get source='config').

- ``crontab`` -> a 5-field cron string from its original fields, with day_and=True
  (Celery ANDs day-of-month and day-of-week); zone: the crontab's own tz, else
  app.conf.timezone, else UTC.
- ``timedelta``, plain numbers and ``schedule(run_every=...)`` -> interval.
- ``relative`` schedules -> plain interval of run_every (no rounding to the period).
- ``solar`` -> ScheduleError("beat_schedule['x']", "solar schedules are not supported").
- ``options`` may also carry schedule fields (SCHEDULE_OPTIONS): ``overlap`` (allow, skip, buffer_one,
  cancel_other), ``overlap_terminate``, ``skip_dates`` and ``calendar``.

Importing twice changes nothing (unchanged rows keep their cursors). Config rows
whose entry left the config are deactivated; API/CLI rows are never touched. A bad
entry is logged and skipped. The whole sync runs in ``with conn.transaction()``.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from celery import schedules as cs

from . import api
from .db.schedule_store import ScheduleStore
from .errors import ScheduleError
from .spec import ScheduleSpec
from .timing.limits import OPTION_KEYS

log = logging.getLogger(__name__)

#: Entry options that set a schedule field rather than a publish option, e.g. ``options={"overlap": "buffer_one"}``.
SCHEDULE_OPTIONS = ("overlap", "overlap_terminate", "skip_dates", "calendar")


def _field(name: str, reason: str) -> ScheduleError:
    return ScheduleError(f"beat_schedule[{name!r}]", reason)


def _zone_of(app: Any, sched: Any) -> str:
    tz = getattr(sched, "tz", None)
    if tz is not None:
        key = getattr(tz, "key", None) or getattr(tz, "zone", None) or str(tz)
        return str(key)
    return str(getattr(app.conf, "timezone", None) or "UTC")


def timing_of(app: Any, name: str, sched: Any) -> dict[str, Any]:
    """The api keyword arguments (cron/every/timezone/day_and) of one entry's schedule."""
    if isinstance(sched, cs.solar):
        raise _field(name, "solar schedules are not supported")
    if isinstance(sched, cs.crontab):
        parts = [str(getattr(sched, f"_orig_{f}")).replace(" ", "") for f in
                 ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")]
        return {"cron": " ".join(parts), "day_and": True, "timezone": _zone_of(app, sched)}
    if isinstance(sched, cs.schedule):  # includes relative
        every = sched.run_every
        return {"every": every.total_seconds() if isinstance(every, timedelta) else float(every),
                "timezone": _zone_of(app, sched)}
    if isinstance(sched, timedelta):
        return {"every": sched.total_seconds(), "timezone": _zone_of(app, None)}
    if isinstance(sched, (int, float)) and not isinstance(sched, bool):
        return {"every": float(sched), "timezone": _zone_of(app, None)}
    raise _field(name, f"unsupported schedule type {type(sched).__name__}")


def entry_columns(app: Any, name: str, entry: dict[str, Any]) -> dict[str, Any]:
    """Validated job_schedules columns of one beat_schedule entry."""
    if not isinstance(entry, dict) or "task" not in entry or "schedule" not in entry:
        raise _field(name, "an entry needs 'task' and 'schedule'")
    given = entry.get("options") or {}
    options = {k: v for k, v in given.items() if k in OPTION_KEYS}
    policies = {k: given[k] for k in SCHEDULE_OPTIONS if k in given}
    try:
        spec = ScheduleSpec(name, entry["task"], args=list(entry.get("args") or ()), kwargs=entry.get("kwargs") or {},
                            options=options, source="config", **policies, **timing_of(app, name, entry["schedule"]))
        return spec.columns()
    except ScheduleError as exc:
        if exc.field.startswith("beat_schedule["):
            raise
        raise _field(name, f"{exc.field}: {exc.reason}") from None


def sync_beat_schedule(conn: Any, app: Any, entries: dict[str, Any]) -> dict[str, Any]:
    """Make the config rows match ``entries``; returns counts and the skipped entries' errors."""
    report: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0, "deactivated": 0,
                              "errors": {}}
    store = ScheduleStore(conn)
    with conn.transaction():
        for name, entry in (entries or {}).items():
            try:
                report[_sync_entry(store, app, name, entry)] += 1
            except Exception as exc:  # one bad entry never stops the others
                log.error("runledger: skipping %s", exc if isinstance(exc, ScheduleError)
                          else f"beat_schedule[{name!r}]: {exc}")
                report["errors"][name] = str(exc)
        gone = [r["id"] for r in store.config_schedules() if r["name"] not in (entries or {})]
        if gone:
            report["deactivated"] = len(store.deactivate_config(gone))
    return report


def _sync_entry(store: ScheduleStore, app: Any, name: str, entry: Any) -> str:
    """Create or update one entry's row in its own savepoint; returns the outcome."""
    cols = entry_columns(app, name, entry)
    with store.conn.transaction():
        existing = store.schedule(name)
        if existing is not None and existing["source"] != "config":
            raise _field(name, "a schedule of that name was made by the API/CLI; left alone")
        return api.save(store, cols)[1]
