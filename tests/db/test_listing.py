"""Schedules a page at a time (ops/listing.py), stats a page at a time, and the indexes behind the operator reads:
every schedule walked exactly once, search by substring (pg_trgm) or by prefix (without it), next fires computed
without a query per row, estimated counts, and no read of an operator surface that scans the ledger."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from runledger_beat import api
from runledger_beat.db import connect, migrate, queries
from runledger_beat.errors import ScheduleError
from runledger_beat.ops.listing import EXACT_COUNT_BELOW, next_fires, schedule_count, schedule_page
from runledger_beat.ops.stats import stats_page

from ..support.services import session_database

ODD_NAMES = ["Zeta", "a b", "ü-name", "x%y", "x_y", "under_score", "UPPER/lower", "0-first", "~tilde"]


def bulk(db, count: int, prefix: str = "job-", task: str = "app.tasks.daily") -> None:
    """``count`` daily cron schedules written by raw SQL, as an operator might."""
    db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, next_fire_at)"
               " SELECT gen_random_uuid(), %s || lpad(i::text, 6, '0'), %s, '{\"args\": [], \"kwargs\": {}}',"
               " 'cron', '0 3 * * *', now() + interval '1 hour' FROM generate_series(1, %s) AS i",
               (prefix, task, count))


def walk(conn, limit: int, **filters) -> list[str]:
    names, after, pages = [], None, 0
    while True:
        page = schedule_page(conn, limit=limit, after=after, **filters)
        assert len(page.rows) <= limit
        names += [r["name"] for r in page.rows]
        pages += 1
        assert pages < 1000
        if page.after is None:
            return names
        assert page.after == page.rows[-1]["name"]
        after = page.after


def test_pages_walk_every_schedule_exactly_once(db):
    bulk(db, 240)
    for name in ODD_NAMES:
        api.create(db, name, "app.tasks.odd", every=60)
    expected = [r["name"] for r in db.execute("SELECT name FROM job_schedules ORDER BY name").fetchall()]
    for limit in (7, 100, 1000):
        names = walk(db, limit)
        assert names == expected and len(set(names)) == len(expected) == 249
    assert walk(db, 3, task="app.tasks.odd") == sorted(ODD_NAMES, key=expected.index)
    last = schedule_page(db, limit=5, after=expected[-3])
    assert [r["name"] for r in last.rows] == expected[-2:] and last.after is None
    with pytest.raises(ScheduleError) as refused:
        schedule_page(db, limit=1001)
    assert refused.value.field == "limit"
    with pytest.raises(ScheduleError) as refused:
        schedule_page(db, limit=0)
    assert refused.value.field == "limit"
    with pytest.raises(ScheduleError) as refused:
        schedule_page(db, q="x" * 201)
    assert refused.value.field == "q"


def in_order(db, names: list[str]) -> list[str]:
    """``names`` in the database's order of names."""
    return [r["n"] for r in db.execute("SELECT n FROM unnest(%s::text[]) AS n ORDER BY n", (names,))]


def test_search_matches_a_substring_of_name_or_task_case_insensitively(db):
    for name, task in [("billing/daily-report", "app.report"), ("Billing/weekly", "app.report"),
                       ("cleanup", "app.tasks.purge_billing"), ("x%y", "app.other"), ("x_y", "app.other"),
                       ("xay", "app.other"), ("nightly", "app.report")]:
        api.create(db, name, task, every=60)
    page = schedule_page(db, q="BILLING")
    assert page.mode == "substring"
    assert [r["name"] for r in page.rows] == in_order(db, ["billing/daily-report", "Billing/weekly", "cleanup"])
    assert [r["name"] for r in schedule_page(db, q="DAILY").rows] == ["billing/daily-report"]
    assert [r["name"] for r in schedule_page(db, q="purge").rows] == ["cleanup"]
    assert [r["name"] for r in schedule_page(db, q="%").rows] == ["x%y"]  # wildcards match literally
    assert [r["name"] for r in schedule_page(db, q="x_y").rows] == ["x_y"]
    assert schedule_page(db, q="nothing-like-it").rows == []
    assert len(walk(db, 1, q="billing")) == 3
    assert [r["name"] for r in schedule_page(db, q="billing", task="app.report").rows] == in_order(
        db, ["billing/daily-report", "Billing/weekly"])
    assert len(schedule_page(db, q="   ").rows) == 7  # a blank search is no search


def database_without_trgm(pg_dsn: str) -> str:
    """A fresh database where CREATE EXTENSION is refused (as where pg_trgm is not installed or not allowed)."""
    dsn = session_database(pg_dsn, "notrgm")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE FUNCTION refuse_extension() RETURNS event_trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "RAISE insufficient_privilege USING MESSAGE = 'extensions are not allowed here'; END $$")
        conn.execute("CREATE EVENT TRIGGER refuse_extension ON ddl_command_start WHEN TAG IN ('CREATE EXTENSION')"
                     " EXECUTE FUNCTION refuse_extension()")
    return dsn


def test_without_pg_trgm_the_migration_builds_prefix_indexes_and_search_matches_prefixes(pg_dsn):
    dsn = database_without_trgm(pg_dsn)
    with connect(dsn, "public", autocommit=False) as conn:
        migrate(conn, "runledger")
    with connect(dsn, "runledger", autocommit=True) as db:
        indexes = {r["indexname"] for r in db.execute(
            "SELECT indexname FROM pg_indexes WHERE schemaname = 'runledger' AND tablename = 'job_schedules'")}
        assert {"job_schedules_name_prefix_idx", "job_schedules_task_prefix_idx"} <= indexes
        assert "job_schedules_search_trgm_idx" not in indexes
        assert db.execute("SELECT count(*) AS n FROM pg_extension WHERE extname = 'pg_trgm'").fetchone()["n"] == 0
        for name, task in [("billing/daily", "app.report"), ("Billing/weekly", "app.report"),
                           ("cleanup", "app.purge"), ("nightly-billing", "app.report")]:
            api.create(db, name, task, every=60)
        page = schedule_page(db, q="BILL")
        assert page.mode == "prefix"
        assert [r["name"] for r in page.rows] == in_order(db, ["Billing/weekly", "billing/daily"])
        assert [r["name"] for r in schedule_page(db, q="app.pu").rows] == ["cleanup"]
        assert schedule_page(db, q="daily").rows == []  # not a prefix
        assert schedule_page(db, q="bill%").rows == []  # the wildcard is literal
        with db.transaction():
            db.execute("SET LOCAL enable_seqscan = off")
            plan = _plan(db, queries.web_schedules_page, {"after": None, "limit": 101, "task": None,
                                                          "contains": None, "prefix": "bill%"})
        assert "job_schedules_name_prefix_idx" in plan and "job_schedules_task_prefix_idx" in plan


class Counting(psycopg.Cursor):
    """A cursor that counts the statements it runs."""

    executed = 0

    def execute(self, *args, **kwargs):
        Counting.executed += 1
        return super().execute(*args, **kwargs)


def test_next_fires_are_computed_here_from_the_rows_shown(db):
    api.add_calendar(db, "holidays", ["2030-12-25"])
    api.create(db, "cal", "t.x", cron="0 3 * * *", calendar="holidays")
    api.create(db, "every", "t.x", every=3600)
    api.create(db, "paused", "t.x", cron="0 4 * * *")
    api.pause(db, "paused")
    api.create(db, "zoned", "t.x", cron="30 2 * * *", timezone="Europe/Paris", max_jitter=30)
    bulk(db, 60)
    rows = schedule_page(db, limit=100).rows
    Counting.executed = 0
    db.cursor_factory = Counting
    try:
        fires = next_fires(db, rows, 3)
    finally:
        db.cursor_factory = psycopg.Cursor
    assert Counting.executed <= 2  # the clock and the one calendar, not one per row
    assert len(fires) == 64 and fires[str(api.get(db, "paused")["id"])] == []
    for name in ("cal", "every", "zoned", "job-000001"):
        expected = api.next_fires(db, name, 3)
        assert len(expected) == 3 and fires[api.get(db, name)["id"]] == expected


def test_count_is_exact_when_small_and_estimated_when_large(db):
    bulk(db, 50)
    assert schedule_count(db) == (50, True)
    bulk(db, EXACT_COUNT_BELOW + 2000, prefix="more-")
    db.execute("ANALYZE job_schedules")
    total, exact = schedule_count(db)
    assert not exact and abs(total - (EXACT_COUNT_BELOW + 2050)) <= 0.1 * (EXACT_COUNT_BELOW + 2050)


def _plan(db, statement: str, params: dict) -> str:
    return json.dumps(db.execute("EXPLAIN (FORMAT JSON) " + statement, params).fetchone()["QUERY PLAN"])


def _ledger(db, schedule_id, name, count, status="success", stage="manual"):
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,"
               " created_at, sent_at)"
               " SELECT gen_random_uuid(), %s, %s, now() - make_interval(mins => i), 't.x', '{}', %s, %s,"
               " now() - make_interval(mins => i), now() - make_interval(mins => i) + interval '2 seconds'"
               " FROM generate_series(1, %s) AS i", (schedule_id, name, stage, status, count))


def test_operator_reads_use_indexes_not_ledger_scans(db):
    sid = api.create(db, "one", "t.x", every=60)["id"]
    _ledger(db, sid, "one", 30)
    _ledger(db, sid, "one", 3, status="failed")
    reads = {
        "api_history": {"name": "one", "status": None, "limit": 50},
        "web_last_fires": {"ids": [uuid.UUID(sid)]},
        "web_lag_series": {"id": sid, "limit": 100},
        "web_failed_jobs": {"limit": 100},
        "web_faulted_schedules": {"limit": 101},
        "job_stats": {"name": None, "since": None, "after": None, "limit": 101},
        "web_schedules_page": {"after": "a", "limit": 101, "task": None, "contains": "%on%", "prefix": None},
    }
    with db.transaction():
        db.execute("SET LOCAL enable_seqscan = off")  # what an index can serve, it now serves
        for name, params in reads.items():
            plan = _plan(db, getattr(queries, name), params)
            assert '"Seq Scan"' not in plan, (name, plan)


def test_history_by_name_keeps_the_rows_of_a_removed_schedule(db):
    old = api.create(db, "same", "t.x", every=60)["id"]
    _ledger(db, old, "same", 2)
    api.remove(db, "same")
    new = api.create(db, "same", "t.x", every=60)["id"]
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status)"
               " VALUES (gen_random_uuid(), %s, 'same', now(), 't.x', '{}', 'manual', 'sent')", (new,))
    rows = api.history(db, "same", limit=10)
    assert [r["schedule_id"] for r in rows] == [new, None, None]
    assert len(api.history(db, "same", limit=2)) == 2
    assert [r["schedule_id"] for r in api.history(db, "same", status="sent")] == [new]


def test_stats_go_a_page_of_names_at_a_time(db):
    for name in ("a", "b", "c", "d", "e"):
        sid = api.create(db, name, "t.x", every=60)["id"]
        if name != "c":
            _ledger(db, sid, name, 3)
    _ledger(db, None, "b-removed", 2)  # rows of a removed schedule keep their name
    seen, after = [], None
    while True:
        items, after = stats_page(db, after=after, limit=2)
        seen += [(i["name"], i["total"]) for i in items]
        if after is None:
            break
    assert seen == [("a", 3), ("b", 3), ("b-removed", 2), ("d", 3), ("e", 3)]
    items, after = stats_page(db, "d", limit=1)
    assert [(i["name"], i["counts"]) for i in items] == [("d", {"success": 3})] and after is None
    with pytest.raises(ScheduleError):
        stats_page(db, limit=1001)


def test_migration_indexes_every_partition_of_a_ledger_with_history(pg_dsn, bare_schema):
    with connect(pg_dsn, "public", autocommit=False) as conn:
        migrate(conn, bare_schema, until=8)
    with connect(pg_dsn, bare_schema, autocommit=True) as db:
        db.execute("SELECT count(*) FROM runledger_maintain_ledger_as_of(NULL, 7, now() - interval '12 days')")
        db.execute("INSERT INTO jobs (id, schedule_name, scheduled_for, job_type, payload, stage, status)"
                   " SELECT gen_random_uuid(), 'gone', now() - make_interval(days => d), 't.x', '{}', 'manual',"
                   " CASE WHEN d % 2 = 0 THEN 'failed' ELSE 'success' END FROM generate_series(0, 11) AS d")
    with connect(pg_dsn, "public", autocommit=False) as conn:
        assert migrate(conn, bare_schema, until=9) == ["0009_operator_paging.sql"]
    with connect(pg_dsn, bare_schema, autocommit=True) as db:
        parts = db.execute("SELECT count(*) AS n FROM pg_inherits WHERE inhparent = 'jobs'::regclass").fetchone()["n"]
        assert parts >= 14  # twelve days back, a week ahead, the default
        for index in ("jobs_removed_schedule_idx", "jobs_problem_idx"):
            row = db.execute("SELECT i.indisvalid AS valid, (SELECT count(*) FROM pg_inherits"
                             " WHERE inhparent = i.indexrelid) AS attached FROM pg_index i"
                             " WHERE i.indexrelid = %s::regclass", (index,)).fetchone()
            assert row["valid"] and row["attached"] == parts, index
        assert db.execute("SELECT count(*) AS n FROM pg_proc WHERE proname = 'runledger_index_partitions_0009'"
                          ).fetchone()["n"] == 0
        assert len(api.history(db, "gone", limit=50)) == 12
        assert [r["status"] for r in db.execute(queries.web_failed_jobs, {"limit": 100})] == ["failed"] * 6
