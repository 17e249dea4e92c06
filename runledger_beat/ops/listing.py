"""Schedules a page at a time, for the dashboard, ``GET /api/schedules`` and ``runledger-beat list``.

A page is at most ``limit`` schedules sorted by name after a name (keyset paging: the cost is the page's, never
the table's), optionally of one task and matching a search text. The search is a case-insensitive substring of
the name or the task when migration 0009 could build the trigram index (pg_trgm), a case-insensitive prefix of
either otherwise; ``OpsStore.search_mode`` says which. Next fires are computed here from the rows shown, and the
number of schedules is the planner's estimate once exact counting would mean a scan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from .. import api
from ..db.ops_store import OpsStore
from ..db.schedule_store import ScheduleStore
from ..errors import ScheduleError
from ..spec import check_count, check_lookup

#: Schedules on a page unless a limit is given.
PAGE_ROWS = 100
#: The largest page the dashboard, the JSON API and ``stats`` serve.
MAX_PAGE_ROWS = 1000
#: The largest page ``runledger-beat list`` prints: an explicit ``--limit`` lists a small install whole.
MAX_LIST_ROWS = 1_000_000
#: Below this many schedules (by the planner's estimate) the count is exact.
EXACT_COUNT_BELOW = 10_000
#: The longest search text.
MAX_SEARCH_LEN = 200


@dataclass
class Page:
    """One page: ``rows`` (stored rows, in name order), ``after`` the name the next page starts after (None: this
    is the last page), ``mode`` how ``q`` matched ('substring' or 'prefix'; None without a search)."""

    rows: list[dict]
    after: str | None
    mode: str | None = None
    query: dict[str, str] = field(default_factory=dict)


def limit_param(field_name: str, text: str | None, default: int, high: int) -> int:
    """A ``limit`` query parameter: an integer in 1..``high``, ``default`` when absent; ScheduleError otherwise."""
    if text is None:
        return default
    if not (text.isascii() and text.isdigit() and len(text) <= 9):
        raise ScheduleError(field_name, f"must be an integer in 1..{high}, got {text[:20]!r}")
    return check_count(field_name, int(text), 1, high)


def like_escape(text: str) -> str:
    """``text`` with LIKE's wildcards (and the escape character) escaped, to match literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def check_search(text: str | None) -> str | None:
    """The search text (None or blank: no search); ScheduleError("q") when too long or not storable text."""
    if text is None or not text.strip():
        return None
    if len(text) > MAX_SEARCH_LEN:
        raise ScheduleError("q", f"at most {MAX_SEARCH_LEN} characters, got {len(text)}")
    return check_lookup("q", text.strip())


def schedule_page(conn: Any, *, limit: int = PAGE_ROWS, after: str | None = None, q: str | None = None,
                  task: str | None = None, high: int = MAX_PAGE_ROWS) -> Page:
    """At most ``limit`` (1..``high``) schedules by name after ``after``, of ``task``, matching ``q``."""
    check_count("limit", limit, 1, high)
    after = check_lookup("after", after) if after else None
    task = check_lookup("task", task) if task else None
    q = check_search(q)
    store = OpsStore(conn)
    mode = store.search_mode() if q else None
    pattern = like_escape(q or "")
    rows = store.schedules_page(after=after, limit=limit + 1, task=task,
                                contains=f"%{pattern}%" if mode == "substring" else None,
                                prefix=f"{pattern.lower()}%" if mode == "prefix" else None)
    more = len(rows) > limit
    rows = rows[:limit]
    query = {k: v for k, v in (("q", q), ("task", task)) if v}
    return Page(rows=rows, after=rows[-1]["name"] if more else None, mode=mode, query=query)


def next_fires(conn: Any, rows: list[Mapping[str, Any]], count: int) -> dict[str, list[datetime]]:
    """{schedule id: its next ``count`` fires} of ``rows``, computed in this process from the database clock: one
    query for the clock and one per distinct calendar among the rows, none per row."""
    store = ScheduleStore(conn)
    now = store.db_now()
    calendars: dict[str, Any] = {}
    for name in {r["calendar"] for r in rows if r.get("calendar")}:
        found = store.calendar(name)
        calendars[name] = found["dates"] if found else None
    return {str(r["id"]): api.planned_fires(dict(r, calendar_dates=calendars.get(r.get("calendar"))), now, count)
            for r in rows}


def schedule_count(conn: Any) -> tuple[int, bool]:
    """(how many schedules, exact?): exact below EXACT_COUNT_BELOW by the planner's estimate, else the estimate."""
    store = OpsStore(conn)
    estimate = store.schedules_estimate()
    if estimate < EXACT_COUNT_BELOW:
        return store.schedules_count(), True
    return estimate, False


def next_href(path: str, page: Page, limit: int, default_limit: int = PAGE_ROWS) -> str | None:
    """The address of the page after ``page`` (same search, same limit), None on the last page."""
    if page.after is None:
        return None
    params = dict(page.query)
    if limit != default_limit:
        params["limit"] = str(limit)
    params["after"] = page.after
    return f"{path}?{urlencode(params)}"
