"""Per-schedule ledger numbers: counts by status and lag percentiles, computed in SQL.

Lags are p50/p99/max seconds from scheduled_for to sent_at and to started_at. They are computed for one page of
schedules by name (keyset, like listing.py), each from its own ledger rows through an index, so the cost is the
page's. ``runledger-beat stats [NAME] [--since DURATION] [--after NAME] [--limit N] [--json]`` prints them.
"""

from __future__ import annotations

from ..db.ops_store import OpsStore
from ..spec import check_count, check_lookup
from ..timing.formats import parse_duration
from .listing import MAX_PAGE_ROWS, PAGE_ROWS
from .output import render_table

__all__ = ["LAGS", "parse_duration", "render", "stats", "stats_page"]

LAGS = ("send_lag_p50", "send_lag_p99", "send_lag_max", "start_lag_p50", "start_lag_p99", "start_lag_max")


def stats(conn, name: str | None = None, since_seconds: float | None = None, *, after: str | None = None,
          limit: int = PAGE_ROWS) -> list[dict]:
    """One dict per schedule with ledger rows among the first ``limit`` by name after ``after``: name, total,
    counts {status: n} and the lag numbers (stats_page also says where the next page starts)."""
    return stats_page(conn, name, since_seconds, after=after, limit=limit)[0]


def stats_page(conn, name: str | None = None, since_seconds: float | None = None, *, after: str | None = None,
               limit: int = PAGE_ROWS) -> tuple[list[dict], str | None]:
    """(one dict per schedule with ledger rows among the first ``limit`` by name after ``after``: name, total,
    counts {status: n} and the lag numbers; the name the next page starts after, None on the last page)."""
    if name is not None:
        check_lookup("name", name)
    if after is not None:
        check_lookup("after", after)
    check_count("limit", limit, 1, MAX_PAGE_ROWS)
    rows = OpsStore(conn).job_stats(name, since_seconds, after=after, limit=limit + 1)
    if not conn.autocommit:
        conn.commit()
    more = len(rows) > limit
    rows = rows[:limit]
    out = []
    for row in (r for r in rows if r["total"]):
        item = {"name": row["name"], "total": int(row["total"]), "counts": dict(row["counts"] or {})}
        item.update({key: None if row[key] is None else float(row[key]) for key in LAGS})
        out.append(item)
    return out, rows[-1]["name"] if more else None


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
