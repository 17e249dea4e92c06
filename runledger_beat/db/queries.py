"""The named SQL statements of sql/*.sql (migrations aside), loaded once at import.

Each statement starts with a ``-- name --`` line and a one-line comment saying
what it is for; names are unique across the files. ``queries.NAME`` is its
text; only store.py (and db.py's migration runner) use them. queries.sql holds
the beat's, the worker's and the API's statements; other files group a feature's.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def _load(text: str, found: dict[str, str], source: str) -> None:
    """Add the file's {name: sql} to ``found`` (comment lines dropped); a repeated name is an error."""
    parts = _HEADER.split(text)
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise RuntimeError(f"SQL statement {name!r} is defined twice (again in {source})")
        sql = "\n".join(line for line in body.strip().splitlines() if not line.startswith("--")).strip()
        found[name] = sql.rstrip(";")


def _load_all() -> dict[str, str]:
    found: dict[str, str] = {}
    folder = resources.files("runledger_beat.db").joinpath("sql")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".sql"):
            _load(entry.read_text("utf-8"), found, entry.name)
    return found


_QUERIES = _load_all()


def __getattr__(name: str) -> str:
    try:
        return _QUERIES[name]
    except KeyError:
        raise AttributeError(f"no SQL statement named {name!r} in sql/*.sql") from None
