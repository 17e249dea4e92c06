"""What the operator surfaces print: plain-text tables, and values as JSON allows (the CLI's --json, the
dashboard's API)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from ..timing.formats import format_rfc3339


def render_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces, trailing blanks trimmed."""
    lines = [[str(cell) for cell in header]] + [["-" if cell is None else str(cell) for cell in row] for row in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=False)).rstrip() for line in lines)


def jsonable(value: Any) -> Any:
    """Datetimes as RFC 3339 UTC, dates ISO 8601, ids as strings, keys as strings, the rest as JSON allows."""
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)  # e.g. a value the database holds that is not plain JSON
