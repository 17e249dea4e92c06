"""Schedules from django-celery-beat's tables: one runledger schedule per PeriodicTask, of the same name.

Field by field: interval -> every (its period in seconds); crontab -> cron from Celery's expansion of its
fields, in its own zone, day-of-month AND day-of-week as Celery matches them; clocked -> once at
clocked_time; one_off on an interval or crontab -> once at the fire it would run at (the first after its last
run, or its start_time); solar -> refused. enabled=False, or a one_off that already ran -> paused.
start_time -> start; expires -> end (django-celery-beat stops the task then); expire_seconds, queue,
exchange, routing_key, priority, headers -> options; args/kwargs JSON text -> args/kwargs.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

from celery import schedules as cs

from ..db.source_store import TASKS_TABLE, DjangoCeleryBeatStore
from ..spec import ScheduleSpec
from ..timing.cron import compile_cron
from .celery_schedules import Refused, crontab_cron
from .plan import Candidate, candidate

#: Seconds per IntervalSchedule.period.
PERIODS = {"days": 86400.0, "hours": 3600.0, "minutes": 60.0, "seconds": 1.0, "microseconds": 1e-6}
#: PeriodicTask columns copied into the publish options as they are.
OPTION_COLUMNS = ("queue", "exchange", "routing_key", "priority")


def read(conn: Any) -> list[Candidate]:
    """Every PeriodicTask of the schema ``conn`` searches, as a Candidate; Refused when there are none."""
    store = DjangoCeleryBeatStore(conn)
    tables = store.tables()
    if TASKS_TABLE not in tables:
        raise Refused(f"no {TASKS_TABLE} table in that schema (is django-celery-beat migrated there?)")
    schedules = store.schedules(tables)
    return [candidate(str(task["name"]), lambda task=task: task_columns(task, schedules))
            for task in store.periodic_tasks()]


def _instant(value: Any) -> datetime | None:
    """A timestamp column as JSON gives it (ISO text, the fraction's trailing zeros dropped), as an aware
    datetime; the fraction is padded to 6 digits, which Python 3.10's fromisoformat needs."""
    if value in (None, ""):
        return None
    text = re.sub(r"\.(\d{1,6})", lambda m: "." + m.group(1).ljust(6, "0"), str(value), count=1)
    instant = datetime.fromisoformat(text)
    return instant if instant.tzinfo else instant.replace(tzinfo=timezone.utc)


def _json(task: dict[str, Any], column: str, default: str, kind: type) -> Any:
    try:
        value = json.loads(task.get(column) or default)
    except ValueError as exc:
        raise Refused(f"{column}: not JSON ({exc})") from None
    if not isinstance(value, kind):
        raise Refused(f"{column}: must be a JSON {'list' if kind is list else 'object'}")
    return value


def _options(task: dict[str, Any]) -> dict[str, Any]:
    options = {k: task[k] for k in OPTION_COLUMNS if task.get(k) not in (None, "")}
    if task.get("expire_seconds") and not task.get("expires"):  # django-celery-beat prefers expires
        options["expires"] = task["expire_seconds"]
    headers = _json(task, "headers", "{}", dict)
    if headers:
        options["headers"] = headers
    return options


def _timing(task: dict[str, Any], schedules: dict[str, dict[Any, dict[str, Any]]]) -> dict[str, Any]:
    """cron/every/at and timezone of a PeriodicTask (one_off aside)."""
    def row(column: str) -> dict[str, Any] | None:
        if task.get(column) is None:
            return None
        found = schedules[column].get(task[column])
        if found is None:
            raise Refused(f"{column} {task[column]} points at no row")
        return found
    if (interval := row("interval_id")) is not None:
        if interval.get("period") not in PERIODS:
            raise Refused(f"interval: unknown period {interval.get('period')!r}")
        return {"every": interval["every"] * PERIODS[interval["period"]], "timezone": "UTC"}
    if (crontab := row("crontab_id")) is not None:
        try:
            parsed = cs.crontab(minute=crontab["minute"], hour=crontab["hour"], day_of_week=crontab["day_of_week"],
                                day_of_month=crontab["day_of_month"], month_of_year=crontab["month_of_year"])
        except ValueError as exc:
            raise Refused(f"crontab: {exc}") from None
        return {"cron": crontab_cron(parsed), "day_and": True, "timezone": str(crontab.get("timezone") or "UTC")}
    if (clocked := row("clocked_id")) is not None:
        return {"at": _instant(clocked["clocked_time"]), "timezone": "UTC"}
    if row("solar_id") is not None:
        raise Refused("solar schedules are not supported (they follow the sun, not a clock)")
    raise Refused("the task has no schedule (interval, crontab, clocked or solar)")


def _one_off_at(task: dict[str, Any], timing: dict[str, Any]) -> datetime:
    """The instant a one_off interval or crontab task runs at: its next fire after its last run, or start_time."""
    start, last = _instant(task.get("start_time")), _instant(task.get("last_run_at"))
    if start is not None and last is None:  # django-celery-beat backdates it: due as soon as start_time comes
        return start
    base = last or _instant(task.get("date_changed")) or datetime.now(timezone.utc)
    if "every" in timing:
        at = base + timedelta(seconds=timing["every"])
    else:
        at = compile_cron(timing["cron"], timing["timezone"], True).next_after(base)
        if at is None:
            raise Refused("one_off crontab: it never fires")
    return max(at, start) if start else at


def task_columns(task: dict[str, Any], schedules: dict[str, dict[Any, dict[str, Any]]]) -> dict[str, Any]:
    """Validated job_schedules columns of one PeriodicTask row."""
    timing = _timing(task, schedules)
    ran = bool(task.get("total_run_count"))
    once = "at" in timing or bool(task.get("one_off"))
    if once and "at" not in timing:
        timing = {"at": _one_off_at(task, timing), "timezone": timing["timezone"]}
    spec = ScheduleSpec(
        name=task["name"], task=task["task"], args=_json(task, "args", "[]", list),
        kwargs=_json(task, "kwargs", "{}", dict), options=_options(task),
        active=bool(task.get("enabled", True)) and not (task.get("one_off") and ran),
        start=None if once else _instant(task.get("start_time")), end=_instant(task.get("expires")),
        **timing)
    return spec.columns()
