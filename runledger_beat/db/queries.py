"""The named SQL statements of sql/*.sql (migrations aside), loaded once at import.

Each statement starts with a ``-- name --`` line and a one-line comment saying what it is for; names are
unique across the files. ``queries.NAME`` is its text; only the stores (and migrate.py) use them. The files
are grouped by who runs them: beat.sql, worker.sql, schedules.sql (API, CLI, importer), operations.sql
(operator surfaces), migrate.sql (the migration runner).

``for_schema(schema).NAME`` is the same statement with every runledger table and function named with its schema
(and ``current_schema()`` replaced by the schema's name): the stores run these, so no statement depends on the
session's search_path, which a transaction-mode pooler (PgBouncer) does not keep from one transaction to the next.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from importlib.abc import Traversable

from .connect import check_schema_name

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def named_statements(files: Iterable[Traversable]) -> dict[str, str]:
    """{name: sql} of the given .sql files (comment lines dropped); a name defined twice is an error."""
    found: dict[str, str] = {}
    for entry in sorted(files, key=lambda e: e.name):
        parts = _HEADER.split(entry.read_text("utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in found:
                raise RuntimeError(f"SQL statement {name!r} is defined twice (again in {entry.name})")
            sql = "\n".join(line for line in body.strip().splitlines() if not line.startswith("--")).strip()
            found[name] = sql.rstrip(";")
    return found


_QUERIES = named_statements(e for e in resources.files("runledger_beat.db").joinpath("sql").iterdir()
                            if e.name.endswith(".sql"))


#: The runledger tables the statements name.
TABLES = ("jobs", "job_schedules", "schedule_faults", "calendars", "beats", "workers", "schedule_changes",
          "schema_migrations")
_NAMES = "|".join(TABLES)
_RELATION = re.compile(rf"\b(FROM|JOIN|INTO|UPDATE)(\s+)({_NAMES})\b(?![.(])")
_REGCLASS = re.compile(rf"'({_NAMES})'::regclass")
_FUNCTION = re.compile(r"(?<![\w.\"])(runledger_[a-z_]+)\(")


def qualify(statement: str, schema: str) -> str:
    """``statement`` with the runledger tables and functions named as ``"schema".name`` and ``current_schema()``
    as the schema's name, so it runs the same whatever the session's search_path (or a pooler's backend's)."""
    check_schema_name(schema)  # ConfigError unless a plain identifier: it is written into the SQL
    quoted = f'"{schema}"'
    statement = _RELATION.sub(lambda m: f"{m[1]}{m[2]}{quoted}.{m[3]}", statement)
    statement = _REGCLASS.sub(lambda m: f"'{quoted}.{m[1]}'::regclass", statement)
    statement = _FUNCTION.sub(lambda m: f"{quoted}.{m[1]}(", statement)
    return statement.replace("current_schema()", f"'{schema}'")


class Statements:
    """The named statements qualified with one schema (``for_schema``); unqualified when the schema is None (a
    caller's own connection, whose search_path names the schema)."""

    def __init__(self, schema: str | None) -> None:
        self.schema = schema
        self._done: dict[str, str] = {}

    def __getattr__(self, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        text = self._done.get(name)
        if text is None:
            try:
                text = _QUERIES[name]
            except KeyError:
                raise AttributeError(f"no SQL statement named {name!r} in sql/*.sql") from None
            if self.schema is not None:
                text = qualify(text, self.schema)
            self._done[name] = text
        return text


_BY_SCHEMA: dict[str | None, Statements] = {}


def for_schema(schema: str | None) -> Statements:
    """The statements qualified with ``schema`` (one cached set per schema)."""
    found = _BY_SCHEMA.get(schema)
    if found is None:
        found = _BY_SCHEMA.setdefault(schema, Statements(schema))
    return found


def __getattr__(name: str) -> str:
    try:
        return _QUERIES[name]
    except KeyError:
        raise AttributeError(f"no SQL statement named {name!r} in sql/*.sql") from None
