"""A Python API over the schedules and the ledger.

Every function takes either a DSN string (a connection is opened on ``schema``,
committed and closed; without ``schema``, on the schema the DSN names with
``options=-c runledger.schema=<name>``, else "runledger") or the caller's own psycopg connection: one opened with
``runledger_beat.db.connect`` (its statements then name the schema, so it works
behind a transaction-mode pooler too), or any other whose search_path is on the
runledger schema. On a caller's connection the work runs inside the caller's transaction
and is never committed here (an autocommit connection gets one transaction per
call). Invalid input raises ``ScheduleError(field, reason)`` before anything
is written: every definition goes through ``spec.ScheduleSpec``, every
statement through ``db.schedule_store.ScheduleStore``.

Schedules come back as plain dicts::

    {"id", "name", "task", "organization_id", "kind", "cron", "day_and", "every",
     "at", "timezone", "args", "kwargs", "options", "max_jitter", "misfire",
     "grace", "overlap", "start", "end", "active", "source", "skip_dates", "calendar",
     "overlap_terminate", "anchor_at", "next_fire_at", "last_fired_at", "created_at", "updated_at",
     "pause_note", "paused_at", "paused_by", "paused_by_application",
     "failures", "last_error", "retry_at", "quarantined_at"}

The pause_* keys are None unless the schedule was paused with ``pause()``. The
last four describe a schedule beat could not fire (a bad row written by raw
SQL): its consecutive failures, the last error, when it is retried, and when it
was quarantined (it then never fires until ``resume``).

(datetimes are aware ``datetime`` objects, ids are strings). The cursor
``next_fire_at`` is recomputed (from the database clock, with
``timeengine.first_fire``) only when the timing changes or a paused schedule is
activated; other edits keep it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg

from .db.beat_store import BeatStore
from .db.connect import connect, schema_of
from .db.ops_store import OpsStore
from .db.schedule_store import ScheduleStore
from .errors import ScheduleError
from .payload import merge_schedule_metadata, schedule_metadata
from .settings import DEFAULT_RETENTION_SECONDS, MIN_RETENTION
from .spec import (
    MAX_SKIP_DATES,
    OVERLAP_POLICIES,
    SOURCES,
    TIMING_COLUMNS,
    ScheduleSpec,
    check_count,
    check_lookup,
    check_note,
    check_organization,
    check_row,
    check_skip_dates,
    check_text,
)
from .timing.engine import Timing, first_fire, next_fire_after
from .timing.formats import format_rfc3339, parse_instant
from .timing.limits import MAX_NAME_LEN, OPTION_KEYS
from .timing.rows import timing_from_row

__all__ = ["OPTION_KEYS", "OVERLAP_POLICIES", "SOURCES", "TIMING_COLUMNS", "ScheduleError", "add_calendar", "audit",
           "backfill", "create", "get", "list_calendars", "remove_calendar",
           "history", "list_schedules", "next_fires", "pause", "planned_fires", "public", "public_job", "remove",
           "resume", "save",
           "trigger", "update", "upsert"]

_UNSET: Any = object()
#: The largest row limit: SQL's LIMIT takes a bigint.
MAX_LIMIT = 2**63 - 1


# ---------------------------------------------------------------------------
# Connections


@contextmanager
def _session(conn_or_dsn: Any, schema: str | None, write: bool = True) -> Iterator[ScheduleStore]:
    """The store to use; a DSN gets its own connection, committed on success. A write the database's
    constraints refuse becomes a ScheduleError naming the field."""
    try:
        with _store(conn_or_dsn, schema, write) as store:
            yield store
    except psycopg.errors.CheckViolation as exc:
        name = exc.diag.constraint_name or "a constraint"
        field = name.removeprefix("job_schedules_").removeprefix("jobs_")
        for suffix in ("_in_range", "_valid", "_length", "_printable"):
            field = field.removesuffix(suffix)
        raise ScheduleError(field, f"refused by the database (constraint {name}); correct the field") from None


@contextmanager
def _store(conn_or_dsn: Any, schema: str | None, write: bool) -> Iterator[ScheduleStore]:
    if isinstance(conn_or_dsn, str):
        conn = connect(conn_or_dsn, schema_of(conn_or_dsn, schema), autocommit=False)
        try:
            yield ScheduleStore(conn)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
        finally:
            conn.close()
        return
    conn = conn_or_dsn
    if write and conn.autocommit:
        with conn.transaction():
            yield ScheduleStore(conn)
    else:
        yield ScheduleStore(conn)


# ---------------------------------------------------------------------------
# Writing


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and float(a) == float(b)
    return a == b


def _cursor(store: ScheduleStore, row: Mapping[str, Any], now: datetime) -> datetime | None:
    return first_fire(_timing(store, row), now, uuid.UUID(str(row["id"])))


def _insert(store: ScheduleStore, cols: dict[str, Any], now: datetime) -> dict:
    new = dict(cols, id=uuid.uuid4(), anchor_at=cols["start_at"] or now)
    new["next_fire_at"] = _cursor(store, new, now) if new["is_active"] else None
    if new["next_fire_at"] is None:
        new["is_active"] = False  # paused, or nothing left to fire
    return store.insert_schedule(new)


def _replace(store: ScheduleStore, old: dict, cols: dict[str, Any], now: datetime) -> dict:
    new = dict(old)
    new.update(cols)
    if cols["start_at"] is not None:
        new["anchor_at"] = cols["start_at"]
    changed = {k for k, v in cols.items() if not _same(old.get(k), v)}
    timing_changed = bool(changed & set(TIMING_COLUMNS))
    activating = cols["is_active"] and not old["is_active"]
    if not cols["is_active"]:
        new["next_fire_at"] = None
    elif timing_changed or activating:
        if activating and not timing_changed and old["kind"] == "once" and old["last_fired_at"]:
            new["next_fire_at"] = None  # a finished one-off stays finished
        else:
            new["next_fire_at"] = _cursor(store, new, now)
        if new["next_fire_at"] is None:
            new["is_active"] = False
    return store.update_schedule(new)


def save(store: ScheduleStore, cols: dict[str, Any], mode: str = "upsert") -> tuple[dict, str]:
    """Insert or update one schedule from validated columns (``ScheduleSpec.columns()``).

    ``mode`` is "create", "update" or "upsert"; returns (row, "created" | "updated" | "unchanged").
    """
    if cols.get("calendar") and store.calendar(cols["calendar"]) is None:
        raise ScheduleError("calendar", f"no calendar named {cols['calendar']!r} (runledger-beat calendar add)")
    now = store.db_now()
    old = store.schedule(cols["name"], lock=True)
    if old is None:
        if mode == "update":
            raise ScheduleError("name", f"no schedule named {cols['name']!r}")
        return _insert(store, cols, now), "created"
    if mode == "create":
        raise ScheduleError("name", f"schedule {cols['name']!r} already exists; use update")
    if all(_same(old.get(k), v) for k, v in cols.items()):
        return old, "unchanged"
    return _replace(store, old, cols, now), "updated"


def planned(store: ScheduleStore, cols: dict[str, Any]) -> str:
    """What ``save(store, cols)`` would do ("created", "updated" or "unchanged"), found without writing."""
    old = store.schedule(cols["name"])
    if old is None:
        return "created"
    return "unchanged" if all(_same(old.get(k), v) for k, v in cols.items()) else "updated"


def _definition(conn_or_dsn: Any, spec: ScheduleSpec, mode: str, schema: str | None) -> dict:
    cols = spec.columns()
    with _session(conn_or_dsn, schema) as store:
        row, _ = save(store, cols, mode)
    return public(row)


def _spec(arguments: Mapping[str, Any]) -> ScheduleSpec:
    """The ScheduleSpec of an upsert/create call (its keyword arguments are the spec's fields)."""
    return ScheduleSpec(**{name: arguments[name] for name in ScheduleSpec.field_names()})


def upsert(conn_or_dsn: Any, name: str, task: str, *, cron: str | None = None, every: Any = None,
           at: Any = None, timezone: str = "UTC", args: Any = (), kwargs: Mapping | None = None,
           options: Mapping | None = None, max_jitter: int = 0, misfire: str = "fire_once",
           grace: Any = None, overlap: str = "allow", start: Any = None, end: Any = None,
           organization_id: Any = None, active: bool = True, day_and: bool = False,
           source: str = "api", skip_dates: Any = (), calendar: str | None = None,
           overlap_terminate: bool = False, schema: str | None = None) -> dict:
    """Create the schedule ``name`` or replace its whole definition; returns it."""
    return _definition(conn_or_dsn, _spec(locals()), "upsert", schema)


def create(conn_or_dsn: Any, name: str, task: str, **fields: Any) -> dict:
    """Like upsert (the same keyword arguments), but a schedule of that name already existing is a
    ScheduleError("name")."""
    schema = fields.pop("schema", None)
    return _definition(conn_or_dsn, ScheduleSpec(name=name, task=task, **fields), "create", schema)


create.__signature__ = inspect.signature(upsert)  # type: ignore[attr-defined]  # help() and editors show upsert's


def update(conn_or_dsn: Any, name: str, task: str = _UNSET, *, cron: Any = _UNSET,
           every: Any = _UNSET, at: Any = _UNSET, timezone: Any = _UNSET, args: Any = _UNSET,
           kwargs: Any = _UNSET, options: Any = _UNSET, max_jitter: Any = _UNSET,
           misfire: Any = _UNSET, grace: Any = _UNSET, overlap: Any = _UNSET, start: Any = _UNSET,
           end: Any = _UNSET, organization_id: Any = _UNSET, active: Any = _UNSET,
           day_and: Any = _UNSET, source: Any = _UNSET, skip_dates: Any = _UNSET, calendar: Any = _UNSET,
           overlap_terminate: Any = _UNSET, schema: str | None = None) -> dict:
    """Change only the given fields of an existing schedule (missing: ScheduleError("name")).

    Giving one of cron / every / at switches the schedule to that form. ``options``
    given as a dict is merged into the existing options (a None value drops a key).
    """
    given = {k: v for k, v in dict(
        task=task, cron=cron, every=every, at=at, timezone=timezone, args=args, kwargs=kwargs, options=options,
        max_jitter=max_jitter, misfire=misfire, grace=grace, overlap=overlap, start=start, end=end,
        organization_id=organization_id, active=active, day_and=day_and, source=source, skip_dates=skip_dates,
        calendar=calendar, overlap_terminate=overlap_terminate).items() if v is not _UNSET}
    check_lookup("name", name)
    with _session(conn_or_dsn, schema) as store:
        old = store.schedule(name, lock=True)
        if old is None:
            raise ScheduleError("name", f"no schedule named {name!r}")
        spec = ScheduleSpec.from_row(old)
        if any(k in given for k in ("cron", "every", "at")):
            spec = dataclasses.replace(spec, cron=None, every=None, at=None)
        if given.get("options") is not None:
            given["options"] = _merged_options(spec.options, given["options"])
        else:
            given.pop("options", None)
        row, _ = save(store, dataclasses.replace(spec, **given).columns(), "update")
        if row["is_active"] and not old["is_active"]:
            row = store.clear_pause(row["id"]) or row
    return public(row)


def _merged_options(current: Mapping[str, Any], changes: Any) -> dict[str, Any]:
    """Existing options updated with ``changes`` (a None value drops a key)."""
    if not isinstance(changes, Mapping):
        raise ScheduleError("options", f"must be an object, got {type(changes).__name__}")
    merged = dict(current)
    for key, value in changes.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------
# Reading and state changes


def _require(store: ScheduleStore, name: str, lock: bool = False) -> dict:
    row = store.schedule(check_lookup("name", name), lock=lock)
    if row is None:
        raise ScheduleError("name", f"no schedule named {name!r}")
    return row


def get(conn_or_dsn: Any, name: str, *, schema: str | None = None) -> dict | None:
    """The schedule ``name``, or None."""
    check_lookup("name", name)
    with _session(conn_or_dsn, schema, write=False) as store:
        row = store.schedule(name)
    return public(row) if row else None


def list_schedules(conn_or_dsn: Any, task: str | None = None, organization_id: Any = None,
                   active: bool | None = None, *, schema: str | None = None) -> list[dict]:
    """Schedules ordered by name, optionally filtered."""
    org = check_organization(organization_id)
    if task is not None:
        check_lookup("task", task)
    with _session(conn_or_dsn, schema, write=False) as store:
        return [public(r) for r in store.schedules(task, org, active)]


def pause(conn_or_dsn: Any, name: str, *, note: str | None = None, schema: str | None = None) -> dict:
    """Stop a schedule firing (its cursor is cleared), keeping ``note``, when, and who paused it.

    "who" is the database role (current_user) and the session's application_name; ``resume`` clears them.
    """
    note = check_note(note)
    with _session(conn_or_dsn, schema) as store:
        row = store.pause_schedule(_require(store, name, lock=True)["id"], note)
    return public(row)


def resume(conn_or_dsn: Any, name: str, *, schema: str | None = None) -> dict:
    """Start a paused (or quarantined) schedule again from now: missed fires are not caught up, failures are
    forgiven and the pause note is cleared."""
    with _session(conn_or_dsn, schema) as store:
        row = _require(store, name, lock=True)
        store.clear_schedule_faults([row["id"]])
        nxt = _cursor(store, row, store.db_now())
        row = store.set_active(row["id"], nxt is not None, nxt)
        row = store.clear_pause(row["id"]) or row
    return public(row)


def remove(conn_or_dsn: Any, name: str, *, schema: str | None = None) -> bool:
    """Delete a schedule (its ledger rows stay); raises ScheduleError("name") when missing."""
    check_lookup("name", name)
    with _session(conn_or_dsn, schema) as store:
        if not store.delete_schedule(name):
            raise ScheduleError("name", f"no schedule named {name!r}")
    return True


def trigger(conn_or_dsn: Any, name: str, *, schema: str | None = None) -> dict:
    """Fire a schedule now, out of band: a manual pending ledger row the beats publish at once."""
    with _session(conn_or_dsn, schema) as store:
        row = _require(store, name)
        now = store.db_now()
        payload = merge_schedule_metadata(row["payload_template"], schedule_metadata(row["id"], row["name"], now))
        job = store.insert_manual_job({
            "id": uuid.uuid4(), "schedule_id": row["id"], "schedule_name": row["name"],
            "scheduled_for": now, "job_type": row["job_type"],
            "organization_id": row["organization_id"], "payload": payload, "options": row["options"]})
        store.notify_outbox()
    return public_job(job)


def history(conn_or_dsn: Any, name: str, limit: int = 20, status: str | None = None, *,
            schema: str | None = None) -> list[dict]:
    """The latest ledger rows of a schedule (by name), newest first."""
    check_lookup("name", name)
    if status is not None:
        check_lookup("status", status)
    check_count("limit", limit, 1, MAX_LIMIT)
    with _session(conn_or_dsn, schema, write=False) as store:
        rows = store.history(name, status, limit)
    return [public_job(r) for r in rows]


def next_fires(conn_or_dsn: Any, name: str, count: int = 5, *, schema: str | None = None) -> list[datetime]:
    """The next ``count`` fires of an active schedule from the database clock ([] when paused or unplannable)."""
    with _session(conn_or_dsn, schema, write=False) as store:
        row = _require(store, name)
        now = store.db_now()
        if row.get("calendar"):
            found = store.calendar(row["calendar"])
            row = dict(row, calendar_dates=found["dates"] if found else None)
    return planned_fires(row, now, count)


def planned_fires(row: Mapping[str, Any], now: datetime, count: int) -> list[datetime]:
    """The next ``count`` fires after ``now`` of a stored schedule row, computed here without I/O ([] when paused,
    quarantined or unplannable). A row with a calendar carries its dates as ``calendar_dates``."""
    from .timing.engine import fire_times
    if not row["is_active"] or row.get("quarantined_at"):
        return []
    try:
        check_row(row)
        return fire_times(timing_from_row(row), now, uuid.UUID(str(row["id"])), count)
    except (ScheduleError, ValueError, OverflowError):
        return []


def backfill(conn_or_dsn: Any, name: str, start: Any, end: Any, max_slots: int = 10000, *,
             schema: str | None = None) -> dict:
    """Record a pending ledger row for each slot of the schedule's timing in [start, end) that has none.

    Rows are like normal fires (stage 'scheduled', payload = template + ``_schedule``) and marked
    ``backfill``: the running beats' recovery sweep publishes them at once (the beats are notified).
    Idempotent: a slot already in the ledger is left alone. More than ``max_slots`` slots is a
    ScheduleError("max") and nothing is written; so is an ``end`` in the future (by the database clock).
    Naive ``start``/``end`` are in the schedule's time zone. Returns {"schedule", "from", "to", "slots",
    "created", "existing", "ids"} (ids of the rows created, in slot order).
    """
    check_count("max", max_slots, 1, MAX_LIMIT)
    with _session(conn_or_dsn, schema) as store:
        row = _require(store, name)
        tz = row["timezone"]
        begin, finish = parse_instant("from", start, tz), parse_instant("to", end, tz)
        if begin is None or finish is None:
            raise ScheduleError("from" if begin is None else "to", "is required")
        if finish <= begin:
            raise ScheduleError("to", "must be after from")
        if finish > store.db_now():
            raise ScheduleError("to", "must not be in the future (the beat fires what is to come)")
        slots = _slots(_timing(store, row), uuid.UUID(str(row["id"])), begin, finish, max_slots)
        payloads = [json.dumps(merge_schedule_metadata(row["payload_template"],
                                                       schedule_metadata(row["id"], row["name"], at)))
                    for at in slots]
        created = store.insert_backfill(row["id"], [uuid.uuid4() for _ in slots], slots, payloads) if slots else []
        if created:
            store.notify_outbox()
    ids = [str(r["id"]) for r in sorted(created, key=lambda r: r["scheduled_for"])]
    return {"schedule": name, "from": begin, "to": finish, "slots": len(slots), "created": len(ids),
            "existing": len(slots) - len(ids), "ids": ids}


def _slots(timing: Timing, schedule_id: uuid.UUID, begin: datetime, finish: datetime, limit: int) -> list[datetime]:
    """The schedule's fires in [begin, finish); more than ``limit`` is ScheduleError("max")."""
    slots: list[datetime] = []
    cursor = next_fire_after(timing, begin - timedelta(microseconds=1), schedule_id)
    while cursor is not None and cursor < finish:
        if len(slots) == limit:
            raise ScheduleError("max", f"more than {limit} slots between {format_rfc3339(begin)} and "
                                       f"{format_rfc3339(finish)}; narrow the range or raise the maximum")
        slots.append(cursor)
        cursor = next_fire_after(timing, cursor, schedule_id)
    return slots


def _timing(store: ScheduleStore, row: Mapping[str, Any]) -> Timing:
    """The Timing of a stored schedule row, its calendar's dates among the skip dates."""
    if row.get("calendar") and "calendar_dates" not in row:
        found = store.calendar(row["calendar"])
        row = dict(row, calendar_dates=found["dates"] if found else None)
    return timing_from_row(row)


def add_calendar(conn_or_dsn: Any, name: str, dates: Any, *, schema: str | None = None) -> dict:
    """Create the calendar ``name`` with ``dates`` (local dates; a list or "2026-12-25,2026-12-26"),
    or add them to an existing one. Schedules using it never fire on those dates (in their own zone)."""
    name = check_text("calendar", name, MAX_NAME_LEN)
    found = check_skip_dates(dates, "dates")
    if not found:
        raise ScheduleError("dates", "give at least one date")
    with _session(conn_or_dsn, schema) as store:
        cal = store.add_calendar(name, found)
        if len(cal["dates"]) > MAX_SKIP_DATES:
            raise ScheduleError("dates", f"a calendar holds at most {MAX_SKIP_DATES} dates")
        store.notify_schedules()
    return dict(cal)


def list_calendars(conn_or_dsn: Any, *, schema: str | None = None) -> list[dict]:
    """Every calendar: {"name", "dates", "created_at", "updated_at", "schedules": [names using it]}."""
    with _session(conn_or_dsn, schema, write=False) as store:
        return [dict(c) for c in store.calendars()]


def remove_calendar(conn_or_dsn: Any, name: str, *, schema: str | None = None) -> bool:
    """Delete a calendar; ScheduleError("calendar") when missing or still used by schedules."""
    check_lookup("calendar", name)
    with _session(conn_or_dsn, schema) as store:
        users = store.calendar_users(name)
        if users:
            raise ScheduleError("calendar", f"calendar {name!r} is used by {', '.join(users)}; "
                                            "update them with --calendar '' first")
        if not store.delete_calendar(name):
            raise ScheduleError("calendar", f"no calendar named {name!r}")
    return True


def audit(conn_or_dsn: Any, name: str | None = None, since: Any = None, *, limit: int = 10000,
          schema: str | None = None) -> list[dict]:
    """Changes to schedules (API, CLI, config import, raw SQL; never beat's cursor moves), oldest first.

    Each entry: {"id", "at", "who", "application_name", "operation", "schedule_id", "schedule_name",
    "before", "after"}; before/after hold only the changed columns (None for an INSERT's before or a
    DELETE's after). ``since`` is seconds, a timedelta or a duration like "1h", counted back from now.
    """
    from .spec import check_seconds
    since_seconds = check_seconds("since", since)
    if name is not None:
        check_lookup("name", name)
    check_count("limit", limit, 1, MAX_LIMIT)
    with _session(conn_or_dsn, schema, write=False) as store:
        rows = store.audit(name, since_seconds, limit)
    return [dict(r, schedule_id=str(r["schedule_id"]) if r["schedule_id"] else None) for r in rows]


def ledger_partitions(conn_or_dsn: Any, *, schema: str | None = None) -> list[dict]:
    """The ledger's partitions, oldest first and the default last: {"name", "holds", "rows_estimate", "bytes"}."""
    with _session(conn_or_dsn, schema, write=False) as store:
        return [dict(r) for r in OpsStore(store.conn).ledger_partitions()]


def maintain_ledger(conn_or_dsn: Any, retention: Any = DEFAULT_RETENTION_SECONDS, *,
                    schema: str | None = None) -> list[dict]:
    """Do now what beats do hourly: day partitions a week ahead, those past ``retention`` dropped.

    ``retention`` is seconds, a timedelta or a duration like "30d" (at least one day; None or 0 keeps
    the whole ledger). Returns what was done: [{"action", "partition_name"}] ("created", "dropped",
    "deleted N" for old rows of the default partition, "busy" for a day whose lock was held elsewhere).
    """
    from .spec import check_seconds
    seconds = check_seconds("retention", retention) or None
    if seconds is not None and seconds < MIN_RETENTION:
        raise ScheduleError("retention", f"at least one day (0 keeps the whole ledger), got {retention!r}")
    with _session(conn_or_dsn, schema) as store:
        return [dict(r) for r in BeatStore(store.conn).maintain_ledger(seconds)]


# ---------------------------------------------------------------------------
# Shapes


def public(row: Mapping[str, Any]) -> dict:
    """A schedule row as the API's dict (see the module docstring)."""
    spec = ScheduleSpec.from_row(row)
    out = {"id": str(row["id"]), "kind": row["kind"]}
    out.update({f: getattr(spec, f) for f in ScheduleSpec.field_names()})
    out["day_and"] = bool(row.get("cron_day_and"))
    out.update({"anchor_at": row.get("anchor_at"), "next_fire_at": row.get("next_fire_at"),
                "last_fired_at": row.get("last_fired_at"), "created_at": row.get("created_at"),
                "updated_at": row.get("updated_at"), "failures": row.get("failures") or 0,
                "last_error": row.get("last_error"), "retry_at": row.get("retry_at"),
                "quarantined_at": row.get("quarantined_at")})
    out.update({k: row.get(k) for k in PAUSE_FIELDS})
    return out


#: The pause note columns, as they appear in the schedule dict.
PAUSE_FIELDS = ("pause_note", "paused_at", "paused_by", "paused_by_application")


JOB_FIELDS = ("id", "schedule_id", "schedule_name", "scheduled_for", "job_type", "organization_id",
              "payload", "options", "stage", "status", "created_at", "sent_at", "started_at",
              "finished_at", "dispatch_attempts", "last_error", "worker", "retries", "duplicates",
              "backfill", "released_at")


def public_job(row: Mapping[str, Any]) -> dict:
    """A ledger row as a dict (ids as strings; ``task`` = job_type)."""
    out = {k: row.get(k) for k in JOB_FIELDS}
    for key in ("id", "schedule_id", "organization_id"):
        if out[key] is not None:
            out[key] = str(out[key])
    out["task"] = out.pop("job_type")
    return out
