"""Per-schedule ledger numbers: counts by status and lag percentiles, computed in SQL.

Lags are p50/p99/max seconds from scheduled_for to sent_at and to started_at.
``runledger-beat stats [NAME] [--since DURATION] [--json]`` prints them.
"""

from __future__ import annotations

from ..db.ops_store import OpsStore
from ..spec import check_lookup
from ..timing.formats import parse_duration
from .output import render_table

__all__ = ["LAGS", "parse_duration", "render", "stats"]

LAGS = ("send_lag_p50", "send_lag_p99", "send_lag_max", "start_lag_p50", "start_lag_p99", "start_lag_max")


def stats(conn, name: str | None = None, since_seconds: float | None = None) -> list[dict]:
    """One dict per schedule name: name, total, counts {status: n}, and the lag numbers."""
    if name is not None:
        check_lookup("name", name)
    rows = OpsStore(conn).job_stats(name, since_seconds)
    if not conn.autocommit:
        conn.commit()
    out = []
    for row in rows:
        item = {"name": row["name"], "total": int(row["total"]), "counts": dict(row["counts"] or {})}
        item.update({key: None if row[key] is None else float(row[key]) for key in LAGS})
        out.append(item)
    return out


def render(items: list[dict]) -> str:
    """The stats as a text table."""
    if not items:
        return "no ledger rows"
    statuses = sorted({s for item in items for s in item["counts"]})
    header = ["schedule", "total", *statuses, "send p50", "send p99", "send max", "start p50", "start p99",
              "start max"]
    rows = [[item["name"] or "(manual)", item["total"], *[item["counts"].get(s, 0) for s in statuses],
             *[None if item[k] is None else f"{item[k]:.3f}" for k in LAGS]] for item in items]
    return render_table(header, rows)
