"""Import a Celery ``app.conf.beat_schedule`` into job_schedules (rows get source='config').

- ``crontab`` -> a 5-field cron built from Celery's expanded field sets, with day_and=True (Celery ANDs
  day-of-month and day-of-week); zone: the one the schedule carries itself, else the given app's.
- ``timedelta``, plain numbers and ``schedule(run_every=...)`` -> interval.
- ``relative`` schedules -> plain interval of run_every (no rounding to the period).
- ``solar`` and custom ``BaseSchedule`` subclasses are refused: ScheduleError("beat_schedule['x']", reason).
- ``options`` may also carry schedule fields (SCHEDULE_OPTIONS): ``overlap`` (allow, skip, buffer_one,
  cancel_other), ``overlap_terminate``, ``skip_dates`` and ``calendar``.

Importing twice changes nothing (unchanged rows keep their cursors). Config rows whose entry left the config
are deactivated; API/CLI rows are never touched. A refused entry is logged as an error (one line each) and,
with ``skip_invalid`` (beat at start), the others are imported; without it nothing is written. The whole sync
runs in ``with conn.transaction()``.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import api
from ..db.schedule_store import ScheduleStore
from ..errors import ScheduleError
from ..spec import ScheduleSpec
from ..timing.limits import OPTION_KEYS
from .celery_schedules import Refused
from .celery_schedules import timing_of as _timing

log = logging.getLogger(__name__)

#: Entry options that set a schedule field rather than a publish option, e.g. ``options={"overlap": "buffer_one"}``.
SCHEDULE_OPTIONS = ("overlap", "overlap_terminate", "skip_dates", "calendar")


def _field(name: str, reason: str) -> ScheduleError:
    return ScheduleError(f"beat_schedule[{name!r}]", reason)


def timing_of(app: Any, name: str, sched: Any) -> dict[str, Any]:
    """The api keyword arguments (cron/every/timezone/day_and) of one entry's schedule."""
    try:
        return _timing(app, sched)
    except Refused as exc:
        raise _field(name, exc.reason) from None


def entry_columns(app: Any, name: str, entry: dict[str, Any], *, source: str = "config",
                  active: bool = True) -> dict[str, Any]:
    """Validated job_schedules columns of one beat_schedule entry (redbeat's definitions have the same shape)."""
    if not isinstance(entry, dict) or "task" not in entry or "schedule" not in entry:
        raise _field(name, "an entry needs 'task' and 'schedule'")
    given = entry.get("options") or {}
    options = {k: v for k, v in given.items() if k in OPTION_KEYS}
    policies = {k: given[k] for k in SCHEDULE_OPTIONS if k in given}
    try:
        spec = ScheduleSpec(name, entry["task"], args=list(entry.get("args") or ()), kwargs=entry.get("kwargs") or {},
                            options=options, source=source, active=active, **policies,
                            **timing_of(app, name, entry["schedule"]))
        return spec.columns()
    except ScheduleError as exc:
        if exc.field.startswith("beat_schedule["):
            raise
        raise _field(name, f"{exc.field}: {exc.reason}") from None


def refused_entries(app: Any, entries: dict[str, Any] | None = None) -> dict[str, str]:
    """Each entry of the app's beat_schedule that cannot be imported, and why (no database needed)."""
    refused = {}
    for name, entry in (app.conf.beat_schedule if entries is None else entries or {}).items():
        try:
            entry_columns(app, name, entry)
        except Exception as exc:  # noqa: BLE001 - every reason is reported, none stops the others
            refused[name] = str(exc) if isinstance(exc, ScheduleError) else f"beat_schedule[{name!r}]: {exc}"
    return refused


class _RollBack(Exception):
    """Raised inside the sync's transaction to undo it when an entry was refused and nothing may be written."""


def sync_beat_schedule(conn: Any, app: Any, entries: dict[str, Any], skip_invalid: bool = True,
                       dry_run: bool = False) -> dict[str, Any]:
    """Make the config rows match ``entries``; returns counts and the refused entries' reasons.

    ``refused`` (also under its older name ``errors``) maps each refused entry to why. With ``skip_invalid`` the
    other entries are imported; without it a refusal writes nothing (``written`` is False). ``dry_run`` counts
    what would change and rolls it all back.
    """
    refused: dict[str, str] = {}
    report: dict[str, Any] = {"created": 0, "updated": 0, "unchanged": 0, "deactivated": 0,
                              "errors": refused, "refused": refused, "written": True}
    store = ScheduleStore(conn)
    try:
        with conn.transaction():
            for name, entry in (entries or {}).items():
                try:
                    report[_sync_entry(store, app, name, entry)] += 1
                except Exception as exc:  # one bad entry never stops the others
                    refused[name] = str(exc) if isinstance(exc, ScheduleError) else f"beat_schedule[{name!r}]: {exc}"
                    log.error("runledger: refused, not scheduled: %s", refused[name])
            if refused and not skip_invalid:
                raise _RollBack
            gone = [r["id"] for r in store.config_schedules() if r["name"] not in (entries or {})]
            if gone:
                report["deactivated"] = len(store.deactivate_config(gone))
            if dry_run:
                raise _RollBack
    except _RollBack:
        report["written"] = False
        if not dry_run:
            report.update(created=0, updated=0, unchanged=0)
    return report


def _sync_entry(store: ScheduleStore, app: Any, name: str, entry: Any) -> str:
    """Create or update one entry's row in its own savepoint; returns the outcome."""
    cols = entry_columns(app, name, entry)
    with store.conn.transaction():
        existing = store.schedule(name)
        if existing is not None and existing["source"] != "config":
            raise _field(name, "a schedule of that name was made by the API/CLI; left alone")
        return api.save(store, cols)[1]
