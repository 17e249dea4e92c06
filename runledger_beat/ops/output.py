"""What the operator surfaces print: plain-text tables, and values as JSON allows (the CLI's --json, the
dashboard's API)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from ..timing.formats import format_rfc3339
from ..timing.limits import MAX_JSON_DEPTH


def render_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, trailing blanks trimmed."""
    lines = [[str(cell) for cell in header]] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False)).rstrip() for line in lines)


def jsonable(value: Any, depth: int = 0) -> Any:
    """A value as JSON carries it: datetimes RFC 3339, dates ISO 8601, UUIDs and other objects as text. A value
    nested deeper than MAX_JSON_DEPTH (only raw SQL can store one) becomes a note saying so, so printing a stored
    row never exhausts Python's recursion limit."""
    if isinstance(value, (dict, list, tuple)) and depth >= MAX_JSON_DEPTH:
        return f"<nested deeper than {MAX_JSON_DEPTH} levels>"
    if isinstance(value, dict):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # e.g. a value the database holds that is not plain JSON
