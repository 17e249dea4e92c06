"""Celery schedule objects as runledger timings.

Celery has already parsed every crontab field into a set of integers (``crontab.minute``, ``.hour``,
``.day_of_month``, ``.month_of_year``, ``.day_of_week``, Sunday = 0), whatever form it was written in: names
full or short in any case, wrap-around ranges, steps, lists, sets, ints. The cron string is built from those
sets, so it means exactly what Celery means; ``day_and`` is always on, because Celery's crontab matches a day
only when month, day of month and day of week all match. ``schedule``, ``timedelta`` and numbers are
intervals. Anything else (``solar``, a custom ``BaseSchedule`` subclass) is refused with a reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import timedelta, tzinfo
from typing import Any

from celery import schedules as cs

#: (crontab attribute, lowest, highest) in the order of a 5-field cron expression.
CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day_of_month", 1, 31), ("month_of_year", 1, 12),
               ("day_of_week", 0, 6))


class Refused(ValueError):
    """A schedule that cannot be imported; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def cron_field(values: Iterable[int], low: int, high: int) -> str:
    """One cron field from a set of ints: ``*`` for the whole range, else ranges and single values."""
    ordered = sorted(set(values))
    if not ordered:
        raise Refused("a crontab field with no values can never fire")
    if ordered == list(range(low, high + 1)):
        return "*"
    runs: list[list[int]] = []
    for value in ordered:
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    parts: list[str] = []
    for first, last in runs:
        parts.extend([str(first)] if first == last else [str(first), str(last)] if last == first + 1
                     else [f"{first}-{last}"])
    return ",".join(parts)


def crontab_cron(sched: cs.crontab) -> str:
    """The 5-field cron expression of a Celery crontab, from Celery's own expanded sets."""
    return " ".join(cron_field(getattr(sched, attr), low, high) for attr, low, high in CRON_FIELDS)


def zone_name(tz: Any) -> str:
    """The IANA name of a tzinfo (zoneinfo, pytz, dateutil) or of a name given as text."""
    if isinstance(tz, str):
        return tz
    name = getattr(tz, "key", None) or getattr(tz, "zone", None)
    if name:
        return str(name)
    if isinstance(tz, tzinfo) and tz.utcoffset(None) == timedelta(0):
        return "UTC"
    raise Refused(f"time zone {tz!r} has no IANA name")


def _local_zone() -> str | None:
    """The IANA name of this machine's local zone, when it has one."""
    if os.environ.get("TZ", "").strip(":"):
        return os.environ["TZ"].strip(":")
    try:
        target = os.path.realpath("/etc/localtime")
    except OSError:
        return None
    return target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else None


def app_zone(app: Any) -> str:
    """The zone Celery runs the app's schedules in: ``timezone``, else UTC (``enable_utc``), else local."""
    conf = app.conf
    if conf.timezone:
        return zone_name(conf.timezone)
    if conf.enable_utc:
        return "UTC"
    local = _local_zone()
    if local is None:
        raise Refused("the app sets neither timezone nor enable_utc and the local zone has no IANA name; "
                      "set app.conf.timezone")
    return local


def schedule_zone(app: Any, sched: Any) -> str:
    """The zone of one schedule: one it carries itself (django-celery-beat's TzAwareCrontab), else the app's.

    A plain crontab's ``tz`` would be read through Celery's current app, so only an instance that sets its own
    zone is asked; every other schedule runs in the zone of ``app``, as Celery beat runs it.
    """
    own = vars(sched).get("tz") if type(sched) is not cs.crontab and hasattr(sched, "__dict__") else None
    return zone_name(own) if own is not None else app_zone(app)


def timing_of(app: Any, sched: Any) -> dict[str, Any]:
    """The api keyword arguments (cron/every, timezone, day_and) of a Celery schedule; Refused if it has none."""
    if isinstance(sched, cs.solar):
        raise Refused("solar schedules are not supported (they follow the sun, not a clock)")
    if isinstance(sched, cs.crontab):
        return {"cron": crontab_cron(sched), "day_and": True, "timezone": schedule_zone(app, sched)}
    if type(sched) is cs.schedule:
        every = sched.run_every
        seconds = every.total_seconds() if isinstance(every, timedelta) else float(every)
        return {"every": seconds, "timezone": app_zone(app)}
    if isinstance(sched, timedelta):
        return {"every": sched.total_seconds(), "timezone": app_zone(app)}
    if isinstance(sched, (int, float)) and not isinstance(sched, bool):
        return {"every": float(sched), "timezone": app_zone(app)}
    kind = type(sched)
    if isinstance(sched, cs.BaseSchedule):
        raise Refused(f"custom schedule class {kind.__module__}.{kind.__qualname__} is not supported "
                      "(only crontab, schedule, timedelta and numbers have a timing runledger can store)")
    raise Refused(f"unsupported schedule type {kind.__name__}")
