"""``runledger-beat stats [NAME] [--since DURATION] [--json]``: per-schedule ledger numbers.

Counts by status, and lag percentiles (p50/p99/max, seconds) from scheduled_for
to sent_at and to started_at, computed in SQL with percentile_cont.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

import psycopg

from . import queries
from .db import DEFAULT_SCHEMA, connect, safe_error

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw]?)", re.IGNORECASE)
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
LAGS = ("send_lag_p50", "send_lag_p99", "send_lag_max", "start_lag_p50", "start_lag_p99", "start_lag_max")


def parse_duration(text: str) -> float:
    """Seconds in ``90``, ``30s``, ``15m``, ``2h``, ``1d``, ``1h30m``; ValueError otherwise."""
    compact = "".join((text or "").split())
    if not compact or not re.fullmatch(r"(?:\d+(?:\.\d+)?[smhdwSMHDW]?)+", compact):
        raise ValueError(f"not a duration: {text!r} (use e.g. 30s, 15m, 2h, 1d)")
    return sum(float(n) * _UNITS[u.lower()] for n, u in _DURATION.findall(compact))


def stats(conn: psycopg.Connection, name: str | None = None, since_seconds: float | None = None) -> list[dict]:
    """One dict per schedule name: name, total, counts {status: n}, and the lag numbers."""
    rows = conn.execute(queries.job_stats, {"name": name, "since": since_seconds}).fetchall()
    if not conn.autocommit:
        conn.commit()
    out = []
    for row in rows:
        row = dict(row) if isinstance(row, dict) else dict(zip(
            ["name", "total", "counts", *LAGS], row))
        item = {"name": row["name"], "total": int(row["total"]), "counts": dict(row["counts"] or {})}
        for key in LAGS:
            item[key] = None if row[key] is None else float(row[key])
        out.append(item)
    return out


def add_stats_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", nargs="?", default=None, help="only this schedule")
    parser.add_argument("--since", default=None, metavar="DURATION",
                        help="only fires scheduled within this long ago (e.g. 1h, 7d)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def render(items: list[dict]) -> str:
    if not items:
        return "no ledger rows"
    statuses = sorted({s for item in items for s in item["counts"]})
    header = ["schedule", "total", *statuses, "send p50", "send p99", "send max",
              "start p50", "start p99", "start max"]
    lines = [header]
    for item in items:
        lines.append([item["name"] or "(manual)", str(item["total"]),
                      *[str(item["counts"].get(s, 0)) for s in statuses],
                      *[_fmt(item[k]) for k in LAGS]])
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in lines)


def run_stats(args: Any) -> int:
    """CLI entry: print the stats; 0 on success, 2 on a bad argument, 1 on a database error."""
    since = None
    if getattr(args, "since", None):
        try:
            since = parse_duration(args.since)
        except ValueError as exc:
            print(f"runledger-beat stats: {exc}", file=sys.stderr)
            return 2
    dsn = getattr(args, "dsn", None)
    try:
        with connect(dsn, getattr(args, "schema", None) or DEFAULT_SCHEMA, autocommit=True) as conn:
            items = stats(conn, getattr(args, "name", None), since)
    except Exception as exc:
        print(f"runledger-beat stats: {safe_error(exc, dsn)}", file=sys.stderr)
        return 1
    if getattr(args, "json", False):
        print(json.dumps(items, indent=2, sort_keys=True))
    else:
        print(render(items))
    return 0
