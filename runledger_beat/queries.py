"""The named SQL statements of sql/queries.sql, loaded once at import.

Use them as ``queries.claim_due_schedules``; ``queries.describe(name)`` gives the
one-line purpose written above each statement.
"""

from __future__ import annotations

import re
from importlib import resources

_HEADER = re.compile(r"^-- ([a-z_]+) --$", re.MULTILINE)


def _load(text: str) -> dict[str, tuple[str, str]]:
    """Split the file into {name: (description, sql)}."""
    parts = _HEADER.split(text)
    found: dict[str, tuple[str, str]] = {}
    for name, body in zip(parts[1::2], parts[2::2]):
        lines = body.strip().splitlines()
        description = lines[0].removeprefix("--").strip() if lines and lines[0].startswith("--") else ""
        sql = "\n".join(line for line in lines if not line.startswith("--")).strip()
        found[name] = (description, sql.rstrip(";"))
    return found


_QUERIES = _load(resources.files("runledger_beat").joinpath("sql/queries.sql").read_text("utf-8"))


def describe(name: str) -> str:
    """The one-line purpose of the named statement."""
    return _QUERIES[name][0]


def names() -> list[str]:
    """Every statement name, in file order."""
    return list(_QUERIES)


def __getattr__(name: str) -> str:
    try:
        return _QUERIES[name][1]
    except KeyError:
        raise AttributeError(f"no SQL statement named {name!r} in sql/queries.sql") from None
