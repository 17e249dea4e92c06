"""A Python API over the schedules and the ledger.

Every function takes either a DSN string (a connection is opened on ``schema``,
committed and closed) or the caller's own psycopg connection, which must have
its search_path on the runledger schema (``runledger_beat.db.connect`` does
that). On a caller's connection the work runs inside the caller's transaction
and is never committed here (an autocommit connection gets one transaction per
call). Invalid input raises ``ScheduleError(field, reason)`` before anything
is written.

Schedules come back as plain dicts::

    {"id", "name", "task", "organization_id", "kind", "cron", "day_and", "every",
     "at", "timezone", "args", "kwargs", "options", "max_jitter", "misfire",
     "grace", "overlap", "start", "end", "active", "source", "anchor_at",
     "next_fire_at", "last_fired_at", "created_at", "updated_at"}

(datetimes are aware ``datetime`` objects, ids are strings). The cursor
``next_fire_at`` is recomputed (from the database clock, with
``timeengine.first_fire``) only when the timing changes or a paused schedule is
activated; other edits keep it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import queries
from .db import DEFAULT_SCHEMA, connect
from .payload import merge_schedule_metadata, schedule_metadata
from .schedule_row import timing_from_row
from .timeengine import ScheduleError, Timing, first_fire, parse_duration
from .cron import zone

__all__ = ["ScheduleError", "create", "get", "history", "list_schedules", "pause", "remove",
           "resume", "trigger", "update", "upsert", "OPTION_KEYS"]

#: Celery publish options a schedule may carry.
OPTION_KEYS = ("queue", "routing_key", "exchange", "priority", "expires", "headers",
               "time_limit", "soft_time_limit")
OVERLAP_POLICIES = ("allow", "skip")
SOURCES = ("api", "config")
#: Columns whose change moves the cursor.
TIMING_COLUMNS = ("kind", "cron_expr", "cron_day_and", "interval_seconds", "run_at", "timezone",
                  "max_jitter_seconds", "start_at", "end_at")
_UNSET: Any = object()


# ---------------------------------------------------------------------------
# Connections


@contextmanager
def _session(conn_or_dsn: Any, schema: str, write: bool = True) -> Iterator[psycopg.Connection]:
    """The connection to use; a DSN gets its own, committed on success."""
    if isinstance(conn_or_dsn, str):
        conn = connect(conn_or_dsn, schema, autocommit=False)
        try:
            yield conn
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
            yield conn
    else:
        yield conn


def _cur(conn: psycopg.Connection) -> psycopg.Cursor:
    return conn.cursor(row_factory=dict_row)


def _one(conn: psycopg.Connection, query: str, params: Mapping[str, Any] | None = None) -> dict | None:
    with _cur(conn) as cur:
        return cur.execute(query, params or {}).fetchone()


def _all(conn: psycopg.Connection, query: str, params: Mapping[str, Any] | None = None) -> list[dict]:
    with _cur(conn) as cur:
        return cur.execute(query, params or {}).fetchall()


def _db_now(conn: psycopg.Connection) -> datetime:
    return _one(conn, queries.api_db_now)["now"]


# ---------------------------------------------------------------------------
# Validation


def _instant(field: str, value: Any, tz: str) -> datetime | None:
    """An aware datetime from a datetime or ISO 8601 text; naive values are in ``tz``."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleError(field, f"invalid ISO 8601 date-time {value!r}") from None
    if not isinstance(value, datetime):
        raise ScheduleError(field, f"expected a date-time, got {value!r}")
    if value.utcoffset() is None:
        value = value.replace(tzinfo=zone(tz))
    return value


def _seconds(field: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool):
        raise ScheduleError(field, f"expected a duration, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return parse_duration(value)
        except ScheduleError as exc:
            raise ScheduleError(field, exc.reason) from None
    raise ScheduleError(field, f"expected a duration, got {value!r}")


def _options(options: Mapping[str, Any] | None) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ScheduleError("options", f"must be an object, got {type(options).__name__}")
    clean: dict[str, Any] = {}
    for key, value in options.items():
        if key not in OPTION_KEYS:
            raise ScheduleError("options", f"unknown option {key!r}; expected one of {', '.join(OPTION_KEYS)}")
        if value is None:
            continue
        if key in ("queue", "routing_key", "exchange"):
            if not isinstance(value, str) or not value:
                raise ScheduleError(key, f"must be a non-empty string, got {value!r}")
        elif key == "priority":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
                raise ScheduleError("priority", f"must be an integer 0..255, got {value!r}")
        elif key == "headers":
            if not isinstance(value, Mapping):
                raise ScheduleError("headers", f"must be an object, got {value!r}")
            value = dict(value)
        else:  # expires, time_limit, soft_time_limit: seconds
            value = _seconds(key, value)
            if value is None or value <= 0:
                raise ScheduleError(key, f"must be a positive number of seconds, got {options[key]!r}")
        clean[key] = value
    return clean


def _organization(value: Any) -> str | None:
    if value is None or value == "":
        return None
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise ScheduleError("organization_id", f"must be a UUID, got {value!r}") from None


def _columns(name: Any, task: Any, *, cron: Any, every: Any, at: Any, timezone: Any, args: Any,
             kwargs: Any, options: Any, max_jitter: Any, misfire: Any, grace: Any, overlap: Any,
             start: Any, end: Any, organization_id: Any, active: Any, day_and: Any,
             source: Any) -> dict[str, Any]:
    """Validate a full definition into column values (no id, anchor or cursor yet)."""
    if not isinstance(name, str) or not name:
        raise ScheduleError("name", "must be a non-empty string")
    if name != name.strip():
        raise ScheduleError("name", f"must not start or end with spaces: {name!r}")
    if not isinstance(task, str) or not task.strip():
        raise ScheduleError("task", "must be a non-empty task name")
    if isinstance(args, tuple):
        args = list(args)
    if not isinstance(args, list):
        raise ScheduleError("args", f"must be a list, got {type(args).__name__}")
    kwargs = {} if kwargs is None else kwargs
    if not isinstance(kwargs, Mapping):
        raise ScheduleError("kwargs", f"must be an object, got {type(kwargs).__name__}")
    if overlap not in OVERLAP_POLICIES:
        raise ScheduleError("overlap", f"unknown policy {overlap!r}; expected allow or skip")
    if source not in SOURCES:
        raise ScheduleError("source", f"unknown source {source!r}; expected api or config")
    given = [k for k, v in (("cron", cron), ("every", every), ("at", at)) if v is not None]
    if len(given) != 1:
        raise ScheduleError("cron", "give exactly one of cron, every or at"
                            + (f" (got {', '.join(given)})" if given else ""))
    if not isinstance(timezone, str) or not timezone:
        raise ScheduleError("timezone", f"unknown time zone {timezone!r}")
    zone(timezone)
    kind = {"cron": "cron", "every": "interval", "at": "once"}[given[0]]
    if kind == "cron" and not isinstance(cron, str):
        raise ScheduleError("cron", f"must be a string, got {cron!r}")
    every_s = _seconds("every", every) if kind == "interval" else None
    timing = Timing(
        kind=kind, cron=cron.strip() if kind == "cron" else None, day_and=bool(day_and),
        every=every_s, at=_instant("at", at, timezone), timezone=timezone,
        start=_instant("start", start, timezone), end=_instant("end", end, timezone),
        max_jitter=max_jitter, misfire=misfire, grace=_seconds("grace", grace),
    ).validate()
    return {
        "name": name, "job_type": task.strip(), "organization_id": _organization(organization_id),
        "payload_template": {"args": list(args), "kwargs": dict(kwargs)},
        "kind": kind, "cron_expr": timing.cron, "cron_day_and": timing.day_and if kind == "cron" else False,
        "interval_seconds": timing.every, "run_at": timing.at, "timezone": timezone,
        "is_active": bool(active), "max_jitter_seconds": timing.max_jitter,
        "options": _options(options), "misfire_policy": timing.misfire,
        "misfire_grace_seconds": timing.grace, "overlap_policy": overlap,
        "start_at": timing.start, "end_at": timing.end, "source": source,
    }


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, datetime) and isinstance(b, datetime):
        return a == b
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and float(a) == float(b)
    return a == b


def _params(cols: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(cols)
    out["payload_template"] = Jsonb(cols["payload_template"])
    out["options"] = Jsonb(cols["options"])
    return out


def _cursor(row: Mapping[str, Any], now: datetime) -> datetime | None:
    return first_fire(timing_from_row(row), now, uuid.UUID(str(row["id"])))


# ---------------------------------------------------------------------------
# Writing


def _save(conn: psycopg.Connection, cols: dict[str, Any], mode: str) -> tuple[dict, str]:
    """Insert or update one schedule; returns (row, "created" | "updated" | "unchanged")."""
    now = _db_now(conn)
    old = _one(conn, queries.api_lock_schedule, {"name": cols["name"]})
    if old is None:
        if mode == "update":
            raise ScheduleError("name", f"no schedule named {cols['name']!r}")
        new = dict(cols, id=uuid.uuid4(), anchor_at=cols["start_at"] or now)
        new["next_fire_at"] = _cursor(new, now) if new["is_active"] else None
        if new["next_fire_at"] is None:
            new["is_active"] = False  # paused, or nothing left to fire
        row = _one(conn, queries.api_insert_schedule, _params(new))
        return row, "created"
    if mode == "create":
        raise ScheduleError("name", f"schedule {cols['name']!r} already exists; use update")
    changed = {k for k, v in cols.items() if not _same(old.get(k), v)}
    if not changed:
        return old, "unchanged"
    new = dict(old)
    new.update(cols)
    if cols["start_at"] is not None:
        new["anchor_at"] = cols["start_at"]
    timing_changed = bool(changed & set(TIMING_COLUMNS))
    activating = cols["is_active"] and not old["is_active"]
    if not cols["is_active"]:
        new["next_fire_at"] = None
    elif timing_changed or activating:
        if activating and not timing_changed and old["kind"] == "once" and old["last_fired_at"]:
            new["next_fire_at"] = None  # a finished one-off stays finished
        else:
            new["next_fire_at"] = _cursor(new, now)
        if new["next_fire_at"] is None:
            new["is_active"] = False
    row = _one(conn, queries.api_update_schedule, _params(new))
    return row, "updated"


def _definition(conn_or_dsn: Any, name: str, task: str, mode: str, schema: str, **fields: Any) -> dict:
    cols = _columns(name, task, **fields)
    with _session(conn_or_dsn, schema) as conn:
        row, _ = _save(conn, cols, mode)
    return public(row)


def upsert(conn_or_dsn: Any, name: str, task: str, *, cron: str | None = None, every: Any = None,
           at: Any = None, timezone: str = "UTC", args: Any = (), kwargs: Mapping | None = None,
           options: Mapping | None = None, max_jitter: int = 0, misfire: str = "fire_once",
           grace: Any = None, overlap: str = "allow", start: Any = None, end: Any = None,
           organization_id: Any = None, active: bool = True, day_and: bool = False,
           source: str = "api", schema: str = DEFAULT_SCHEMA) -> dict:
    """Create the schedule ``name`` or replace its whole definition; returns it."""
    return _definition(conn_or_dsn, name, task, "upsert", schema, cron=cron, every=every, at=at,
                       timezone=timezone, args=args, kwargs=kwargs, options=options,
                       max_jitter=max_jitter, misfire=misfire, grace=grace, overlap=overlap,
                       start=start, end=end, organization_id=organization_id, active=active,
                       day_and=day_and, source=source)


def create(conn_or_dsn: Any, name: str, task: str, *, cron: str | None = None, every: Any = None,
           at: Any = None, timezone: str = "UTC", args: Any = (), kwargs: Mapping | None = None,
           options: Mapping | None = None, max_jitter: int = 0, misfire: str = "fire_once",
           grace: Any = None, overlap: str = "allow", start: Any = None, end: Any = None,
           organization_id: Any = None, active: bool = True, day_and: bool = False,
           source: str = "api", schema: str = DEFAULT_SCHEMA) -> dict:
    """Like upsert, but a schedule of that name already existing is a ScheduleError("name")."""
    return _definition(conn_or_dsn, name, task, "create", schema, cron=cron, every=every, at=at,
                       timezone=timezone, args=args, kwargs=kwargs, options=options,
                       max_jitter=max_jitter, misfire=misfire, grace=grace, overlap=overlap,
                       start=start, end=end, organization_id=organization_id, active=active,
                       day_and=day_and, source=source)


def update(conn_or_dsn: Any, name: str, task: str = _UNSET, *, cron: Any = _UNSET,
           every: Any = _UNSET, at: Any = _UNSET, timezone: Any = _UNSET, args: Any = _UNSET,
           kwargs: Any = _UNSET, options: Any = _UNSET, max_jitter: Any = _UNSET,
           misfire: Any = _UNSET, grace: Any = _UNSET, overlap: Any = _UNSET, start: Any = _UNSET,
           end: Any = _UNSET, organization_id: Any = _UNSET, active: Any = _UNSET,
           day_and: Any = _UNSET, source: Any = _UNSET, schema: str = DEFAULT_SCHEMA) -> dict:
    """Change only the given fields of an existing schedule (missing: ScheduleError("name")).

    Giving one of cron / every / at switches the schedule to that form. ``options``
    given as a dict is merged into the existing options (a None value drops a key).
    """
    with _session(conn_or_dsn, schema) as conn:
        old = _one(conn, queries.api_lock_schedule, {"name": name})
        if old is None:
            raise ScheduleError("name", f"no schedule named {name!r}")
        cur = public(old)
        if any(v is not _UNSET for v in (cron, every, at)):
            cur.update(cron=None, every=None, at=None)
        merged_options = dict(cur["options"])
        if options is not _UNSET and options is not None:
            if not isinstance(options, Mapping):
                raise ScheduleError("options", f"must be an object, got {type(options).__name__}")
            for key, value in options.items():
                if value is None:
                    merged_options.pop(key, None)
                else:
                    merged_options[key] = value
        given = dict(task=task, cron=cron, every=every, at=at, timezone=timezone, args=args,
                     kwargs=kwargs, max_jitter=max_jitter, misfire=misfire, grace=grace,
                     overlap=overlap, start=start, end=end, organization_id=organization_id,
                     active=active, day_and=day_and, source=source)
        for key, value in given.items():
            if value is not _UNSET:
                cur[key] = value
        cols = _columns(name, cur["task"], cron=cur["cron"], every=cur["every"], at=cur["at"],
                        timezone=cur["timezone"], args=cur["args"], kwargs=cur["kwargs"],
                        options=merged_options, max_jitter=cur["max_jitter"],
                        misfire=cur["misfire"], grace=cur["grace"], overlap=cur["overlap"],
                        start=cur["start"], end=cur["end"],
                        organization_id=cur["organization_id"], active=cur["active"],
                        day_and=cur["day_and"], source=cur["source"])
        row, _ = _save(conn, cols, "update")
    return public(row)


def save_columns(conn: psycopg.Connection, cols: dict[str, Any]) -> tuple[dict, str]:
    """Importer hook: upsert already-validated columns; returns (public dict, outcome)."""
    row, outcome = _save(conn, cols, "upsert")
    return public(row), outcome


# ---------------------------------------------------------------------------
# Reading and state changes


def _require(conn: psycopg.Connection, name: str, lock: bool = False) -> dict:
    row = _one(conn, queries.api_lock_schedule if lock else queries.api_get_schedule, {"name": name})
    if row is None:
        raise ScheduleError("name", f"no schedule named {name!r}")
    return row


def get(conn_or_dsn: Any, name: str, *, schema: str = DEFAULT_SCHEMA) -> dict | None:
    """The schedule ``name``, or None."""
    with _session(conn_or_dsn, schema, write=False) as conn:
        row = _one(conn, queries.api_get_schedule, {"name": name})
    return public(row) if row else None


def list_schedules(conn_or_dsn: Any, task: str | None = None, organization_id: Any = None,
                   active: bool | None = None, *, schema: str = DEFAULT_SCHEMA) -> list[dict]:
    """Schedules ordered by name, optionally filtered."""
    params = {"task": task, "organization_id": _organization(organization_id), "active": active}
    with _session(conn_or_dsn, schema, write=False) as conn:
        return [public(r) for r in _all(conn, queries.api_list_schedules, params)]


def pause(conn_or_dsn: Any, name: str, *, schema: str = DEFAULT_SCHEMA) -> dict:
    """Stop a schedule firing (its cursor is cleared)."""
    with _session(conn_or_dsn, schema) as conn:
        row = _require(conn, name, lock=True)
        row = _one(conn, queries.api_set_active, {"id": row["id"], "active": False, "next_fire_at": None})
    return public(row)


def resume(conn_or_dsn: Any, name: str, *, schema: str = DEFAULT_SCHEMA) -> dict:
    """Start a paused schedule again from now: missed fires are not caught up."""
    with _session(conn_or_dsn, schema) as conn:
        row = _require(conn, name, lock=True)
        nxt = _cursor(row, _db_now(conn))
        row = _one(conn, queries.api_set_active,
                   {"id": row["id"], "active": nxt is not None, "next_fire_at": nxt})
    return public(row)


def remove(conn_or_dsn: Any, name: str, *, schema: str = DEFAULT_SCHEMA) -> bool:
    """Delete a schedule (its ledger rows stay); raises ScheduleError("name") when missing."""
    with _session(conn_or_dsn, schema) as conn:
        if _one(conn, queries.api_delete_schedule, {"name": name}) is None:
            raise ScheduleError("name", f"no schedule named {name!r}")
    return True


def trigger(conn_or_dsn: Any, name: str, *, schema: str = DEFAULT_SCHEMA) -> dict:
    """Fire a schedule now, out of band: a manual pending ledger row the beats publish at once."""
    with _session(conn_or_dsn, schema) as conn:
        row = _require(conn, name)
        now = _db_now(conn)
        payload = merge_schedule_metadata(row["payload_template"],
                                          schedule_metadata(row["id"], row["name"], now))
        job = _one(conn, queries.api_insert_manual_job, {
            "id": uuid.uuid4(), "schedule_id": row["id"], "schedule_name": row["name"],
            "scheduled_for": now, "job_type": row["job_type"],
            "organization_id": row["organization_id"], "payload": Jsonb(payload),
            "options": Jsonb(row["options"] or {})})
        _one(conn, queries.api_notify_schedules)
    return public_job(job)


def history(conn_or_dsn: Any, name: str, limit: int = 20, status: str | None = None, *,
            schema: str = DEFAULT_SCHEMA) -> list[dict]:
    """The latest ledger rows of a schedule (by name), newest first."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ScheduleError("limit", f"must be a positive integer, got {limit!r}")
    with _session(conn_or_dsn, schema, write=False) as conn:
        rows = _all(conn, queries.api_history, {"name": name, "status": status, "limit": limit})
    return [public_job(r) for r in rows]


# ---------------------------------------------------------------------------
# Shapes


def public(row: Mapping[str, Any]) -> dict:
    """A schedule row as the API's dict (see the module docstring)."""
    template = row["payload_template"]
    if isinstance(template, dict):
        args, kwargs = list(template.get("args") or []), dict(template.get("kwargs") or {})
    else:
        args, kwargs = [template], {}
    kind = row["kind"]
    return {
        "id": str(row["id"]), "name": row["name"], "task": row["job_type"],
        "organization_id": str(row["organization_id"]) if row.get("organization_id") else None,
        "kind": kind, "cron": row.get("cron_expr") if kind == "cron" else None,
        "day_and": bool(row.get("cron_day_and")),
        "every": row.get("interval_seconds") if kind == "interval" else None,
        "at": row.get("run_at") if kind == "once" else None,
        "timezone": row["timezone"], "args": args, "kwargs": kwargs,
        "options": dict(row.get("options") or {}), "max_jitter": row["max_jitter_seconds"],
        "misfire": row["misfire_policy"], "grace": row.get("misfire_grace_seconds"),
        "overlap": row["overlap_policy"], "start": row.get("start_at"), "end": row.get("end_at"),
        "active": row["is_active"], "source": row["source"], "anchor_at": row.get("anchor_at"),
        "next_fire_at": row.get("next_fire_at"), "last_fired_at": row.get("last_fired_at"),
        "created_at": row.get("created_at"), "updated_at": row.get("updated_at"),
    }


JOB_FIELDS = ("id", "schedule_id", "schedule_name", "scheduled_for", "job_type", "organization_id",
              "payload", "options", "stage", "status", "created_at", "sent_at", "started_at",
              "finished_at", "dispatch_attempts", "last_error", "worker", "retries", "duplicates")


def public_job(row: Mapping[str, Any]) -> dict:
    """A ledger row as a dict (ids as strings; ``task`` = job_type)."""
    out = {k: row.get(k) for k in JOB_FIELDS}
    for key in ("id", "schedule_id", "organization_id"):
        if out[key] is not None:
            out[key] = str(out[key])
    out["task"] = out.pop("job_type")
    return out
