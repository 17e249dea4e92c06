"""The named SQL statements of sql/*.sql (migrations aside), loaded once at import.

Each statement starts with a ``-- name --`` line and a one-line comment saying what it is for; names are
unique across the files. ``queries.NAME`` is its text; only the stores (and migrate.py) use them. The files
are grouped by who runs them: beat.sql, worker.sql, schedules.sql (API, CLI, importer), operations.sql
(operator surfaces), migrate.sql (the migration runner).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from importlib.abc import Traversable

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


def __getattr__(name: str) -> str:
    try:
        return _QUERIES[name]
    except KeyError:
        raise AttributeError(f"no SQL statement named {name!r} in sql/*.sql") from None
