"""Schedules from redbeat's Redis keys: one runledger schedule per entry, of the same name.

Each entry is a hash ``<prefix><name>`` whose ``definition`` field is JSON (name, task, args, kwargs, options,
schedule, enabled), the schedule tagged by ``__type__``: ``interval`` (every seconds), ``crontab`` (the
original field strings, parsed again by Celery) or ``rrule``, which is refused. A definition is a
beat_schedule entry, so it imports as one; enabled=False -> paused. Crontabs carry no zone: redbeat runs them
in the app's zone, given here. Only SCAN and HGET are sent: Redis is never written.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

from celery import schedules as cs

from ..errors import ScheduleError
from .beat_schedule import entry_columns
from .celery_schedules import Refused
from .plan import Candidate, candidate

#: Keys SCAN returns per round trip.
SCAN_COUNT = 500


class _Unsupported:
    """A schedule redbeat can store and runledger cannot (rrule, an unknown type)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind


def _decode(d: dict[str, Any]) -> Any:
    """json object_hook: redbeat's tagged objects as Celery schedules and datetimes."""
    kind = d.pop("__type__", None)
    if kind is None:
        return d
    if kind == "interval":
        return cs.schedule(run_every=timedelta(seconds=float(d["every"])))
    if kind == "crontab":
        return cs.crontab(**d)
    if kind == "datetime":
        zone = d.pop("timezone", "UTC")
        tz = ZoneInfo(zone) if isinstance(zone, str) else timezone(timedelta(seconds=float(zone)))
        return datetime(tzinfo=tz, **d)
    return _Unsupported(str(kind))


def entry_candidate(app: Any, key: str, definition: str) -> Candidate:
    """The Candidate of one entry's definition JSON."""
    def build() -> dict[str, Any]:
        try:
            entry = json.loads(definition, object_hook=_decode)
        except (ValueError, TypeError) as exc:
            raise Refused(f"definition: cannot be decoded ({exc})") from None
        if not isinstance(entry, dict):
            raise Refused("definition: not a JSON object")
        if isinstance(entry.get("schedule"), _Unsupported):
            raise Refused(f"{entry['schedule'].kind} schedules are not supported")
        try:
            return entry_columns(app, name, entry, source="api", active=bool(entry.get("enabled", True)))
        except ScheduleError as exc:
            raise Refused(exc.reason if exc.field.startswith("beat_schedule[") else str(exc)) from None
    try:
        name = str(json.loads(definition).get("name") or key)
    except (ValueError, AttributeError):
        name = key
    return candidate(name, build)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def read(client: Any, prefix: str, app: Any) -> list[Candidate]:
    """Every redbeat entry under ``prefix`` (keys ``<prefix><name>`` holding a ``definition``), by name."""
    found = []
    for key in client.scan_iter(match=_glob_escape(prefix) + "*", count=SCAN_COUNT, _type="HASH"):
        key = key.decode() if isinstance(key, bytes) else key
        definition = client.hget(key, "definition")
        if definition:
            found.append(entry_candidate(app, key, definition.decode() if isinstance(definition, bytes)
                                         else definition))
    return sorted(found, key=lambda c: c.name)
