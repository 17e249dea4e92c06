"""The named SQL statements of sql/queries.sql, loaded once at import.

Each statement in the file starts with a ``-- name --`` line and a one-line
comment saying what it is for. ``queries.NAME`` is its text; only store.py
(and db.py's migration runner) use them.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def _load(text: str) -> dict[str, str]:
    """Split the file into {name: sql}, comment lines dropped."""
    parts = _HEADER.split(text)
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=False):
        sql = "\n".join(line for line in body.strip().splitlines() if not line.startswith("--")).strip()
        found[name] = sql.rstrip(";")
    return found


_QUERIES = _load(resources.files("runledger_beat").joinpath("sql/queries.sql").read_text("utf-8"))


def __getattr__(name: str) -> str:
    try:
        return _QUERIES[name]
    except KeyError:
        raise AttributeError(f"no SQL statement named {name!r} in sql/queries.sql") from None
