"""Loaders that never raise on one bad value, so one bad row never breaks a fetch of many.

Timestamps outside Python's range (``infinity``, ``-infinity``, year 0 or 10000+) load as
``OUT_OF_RANGE_LOW`` / ``OUT_OF_RANGE_HIGH`` (``datetime.min`` / ``datetime.max``, aware in UTC for
timestamptz), and JSON that Python cannot load (nested deeper than the recursion limit) loads as
``UNREADABLE_JSON``. Check with ``is_out_of_range(dt)`` / ``is_unreadable(value)`` before using a value.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
from psycopg.types.datetime import (
    TimestampBinaryLoader,
    TimestampLoader,
    TimestamptzBinaryLoader,
    TimestamptzLoader,
)
from psycopg.types.json import JsonbBinaryLoader, JsonBinaryLoader, JsonbLoader, JsonLoader

#: Sentinels a timestamptz beyond Python's range loads as (timestamp: the same, naive).
OUT_OF_RANGE_HIGH = datetime.max.replace(tzinfo=timezone.utc)
OUT_OF_RANGE_LOW = datetime.min.replace(tzinfo=timezone.utc)
#: What validation says of such a value, after the field name ("end_at: not a finite date-time ...").
OUT_OF_RANGE_REASON = "not a finite date-time within year 1..9999"

class UnreadableJson:
    """Stands for a json/jsonb value Python could not load; its repr says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<unreadable JSON: {self.reason}>"

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnreadableJson)

    def __hash__(self) -> int:
        return hash(UnreadableJson)


#: What a json/jsonb value nested deeper than Python's recursion limit loads as. Invalid JSON text (only
#: possible for ``json``) loads as another UnreadableJson naming the error; all compare equal to this one.
UNREADABLE_JSON = UnreadableJson("nested deeper than Python's recursion limit")


def is_unreadable(value: Any) -> bool:
    """Whether a loaded json/jsonb value is the unreadable sentinel."""
    return isinstance(value, UnreadableJson)


def is_out_of_range(value: Any) -> bool:
    """Whether a loaded timestamp is a sentinel for a value beyond year 1..9999 (or ±infinity).

    ``datetime.max`` itself (9999-12-31T23:59:59.999999) cannot be told apart and counts as out of range.
    """
    if not isinstance(value, datetime):
        return False
    naive = value.replace(tzinfo=None)
    return naive == datetime.max or naive == datetime.min


def _sentinel(data: Any, aware: bool, binary: bool = False) -> datetime:
    """The sentinel for an unloadable timestamp: low for -infinity and BC dates, else high."""
    raw = bytes(data)
    # binary: int64 microseconds since 2000-01-01, negative is before; text: "-infinity" or "... BC"
    low = int.from_bytes(raw[:8], "big", signed=True) < 0 if binary else raw.startswith(b"-") or b"BC" in raw
    value = datetime.min if low else datetime.max
    return value.replace(tzinfo=timezone.utc) if aware else value


def _safe_timestamp(base: type, aware: bool, binary: bool) -> type:
    """A timestamp loader class whose out-of-range values load as the sentinels instead of raising DataError."""

    def load(self: Any, data: Any) -> datetime:
        try:
            return base.load(self, data)
        except (psycopg.DataError, OverflowError, ValueError):
            return _sentinel(data, aware, binary)

    load.__doc__ = "Load, or return the sentinel."
    return type(f"Safe{base.__name__}", (base,), {"load": load, "__doc__": f"{base.__name__} that never raises."})


SafeTimestamptzLoader = _safe_timestamp(TimestamptzLoader, aware=True, binary=False)
SafeTimestamptzBinaryLoader = _safe_timestamp(TimestamptzBinaryLoader, aware=True, binary=True)
SafeTimestampLoader = _safe_timestamp(TimestampLoader, aware=False, binary=False)
SafeTimestampBinaryLoader = _safe_timestamp(TimestampBinaryLoader, aware=False, binary=True)


def _safe_json(base: type) -> type:
    """A json loader class that returns an UnreadableJson instead of raising RecursionError/ValueError."""

    def load(self: Any, data: Any) -> Any:
        try:
            return base.load(self, data)
        except RecursionError:
            return UNREADABLE_JSON
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
            return UnreadableJson(f"not valid JSON ({type(exc).__name__})")

    load.__doc__ = "Load, or return an UnreadableJson sentinel."
    return type(f"Safe{base.__name__}", (base,), {"load": load, "__doc__": f"{base.__name__} that never raises."})


_SAFE_LOADERS: tuple[tuple[str, type], ...] = (
    ("timestamptz", SafeTimestamptzLoader), ("timestamptz", SafeTimestamptzBinaryLoader),
    ("timestamp", SafeTimestampLoader), ("timestamp", SafeTimestampBinaryLoader),
    ("json", _safe_json(JsonLoader)), ("json", _safe_json(JsonBinaryLoader)),
    ("jsonb", _safe_json(JsonbLoader)), ("jsonb", _safe_json(JsonbBinaryLoader)),
)


def register_safe_loaders(conn: psycopg.Connection, timestamps: bool = True) -> None:
    """Register the never-raising json and (with ``timestamps``) timestamp loaders on one connection (connect()
    does this). The timestamp loaders parse in Python, several times slower than psycopg's C ones: beat's claims
    connection goes without them, its claim statement nulling out-of-range instants in SQL instead."""
    for type_name, loader in _SAFE_LOADERS:
        if timestamps or not type_name.startswith("timestamp"):
            conn.adapters.register_loader(type_name, loader)
