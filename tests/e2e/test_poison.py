"""Dozens of bad rows beside every-second schedules, two real beats: every good slot goes out on time.

The bad rows come three ways: written by raw SQL into an install that predates
migration 0002 (then migrated: the constraints do not check old rows), written
by raw SQL after it (refused at the door), and offered to the API (refused with
a ScheduleError). Old bad rows must be quarantined with their reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from datetime import timedelta

import psycopg
import pytest
from psycopg import sql

from runledger_beat import api
from runledger_beat.db import connect, drop_schema, migrate, migration_files, queries
from runledger_beat.errors import ScheduleError

from ..support.e2e import delete_queue, prepare
from ..support.procs import start_beat, start_worker
from ..support.services import wait_for

pytestmark = pytest.mark.slow

GOOD = 20
WINDOW = 20  # seconds of every-second fires judged
#: Old rows (before 0002): (name, column overrides as SQL literals), every one of them unplannable.
OLD_BAD = [
    ("cron-61", {"cron_expr": "'61 * * * *'"}),
    ("cron-words", {"cron_expr": "'every day at noon'"}),
    ("cron-four-fields", {"cron_expr": "'* * * *'"}),
    ("cron-nickname", {"cron_expr": "'@fortnightly'"}),
    ("cron-step-zero", {"cron_expr": "'*/0 * * * *'"}),
    ("cron-never", {"cron_expr": "'0 0 31 2 *'"}),
    ("zone-mars", {"timezone": "'Mars/Olympus'"}),
    ("end-infinity", {"end_at": "'infinity'"}),
    ("start-infinity", {"start_at": "'infinity'"}),
    ("cursor-minus-infinity", {"next_fire_at": "'-infinity'"}),
    ("interval-null", {"kind": "'interval'", "cron_expr": "NULL"}),
    ("interval-nan", {"kind": "'interval'", "cron_expr": "NULL", "interval_seconds": "'NaN'"}),
    ("interval-negative", {"kind": "'interval'", "cron_expr": "NULL", "interval_seconds": "-5"}),
    ("interval-huge", {"kind": "'interval'", "cron_expr": "NULL", "interval_seconds": "1e300"}),
    ("once-without-run-at", {"kind": "'once'", "cron_expr": "NULL"}),
    ("grace-nan", {"misfire_grace_seconds": "'NaN'"}),
    ("template-deep", {"payload_template": "(repeat('[', 3000) || repeat(']', 3000))::jsonb"}),
    ("options-array", {"options": "'[1, 2]'"}),
    ("template-stray-key", {"payload_template": "'{\"a\": 1}'"}),
    ("template-args-string", {"payload_template": "'{\"args\": \"abc\"}'"}),
    ("kind-cron-null", {"cron_expr": "NULL"}),
]
#: Rows raw SQL may no longer write (0002 refuses them); each is a column override.
REFUSED = [
    {"options": "'{\"expires\": 3e11}'"}, {"options": "'{\"headers\": {\"task\": \"evil\"}}'"},
    {"options": "'{\"priority\": \"high\"}'"}, {"options": "'{\"serializer\": \"pickle\"}'"},
    {"end_at": "'infinity'"}, {"payload_template": "'{\"args\": \"abc\"}'"}, {"payload_template": "'\"abc\"'"},
    {"interval_seconds": "'NaN'", "kind": "'interval'", "cron_expr": "NULL"}, {"name": "E'bad\\nname'"},
    {"job_type": "repeat('t', 500)"},
]
#: Offered to the API: each must raise ScheduleError.
API_BAD = [
    {"every": float("inf")}, {"every": 1, "args": [float("nan")]}, {"every": 1, "kwargs": {"a": object()}},
    {"every": 1, "options": {"expires": 3e11}}, {"cron": "61 * * * *"}, {"cron": "* * * * *", "timezone": "Mars/X"},
    {"every": 1, "options": {"headers": {"id": "x"}}}, {"every": 1, "end": "9999-12-31T23:00:00"},
]


def _insert_sql(name: str, overrides: dict[str, str]) -> str:
    """An INSERT of a due every-second cron row, with some columns replaced by SQL literals (test constants only)."""
    columns = {"id": f"'{uuid.uuid4()}'", "name": f"'{name}'", "job_type": "'rl.record'",
               "payload_template": f"'{json.dumps({'args': [name], 'kwargs': {}})}'", "kind": "'cron'",
               "cron_expr": "'* * * * * *'", "next_fire_at": "now()"}
    columns.update(overrides)
    return f"INSERT INTO job_schedules ({', '.join(columns)}) VALUES ({', '.join(columns.values())})"


@pytest.fixture
def old_install(pg_dsn):
    """A schema at migration 0001 only (an install older than the constraints), dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    version, file_name, text = migration_files()[0]
    with connect(pg_dsn, "public", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(name)))
        conn.execute(queries.create_migrations_table)
        conn.execute(text)
        conn.execute(queries.record_migration, {"version": version, "name": file_name})
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        drop_schema(conn, name)


def _cli(pg_dsn: str, schema: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--dsn", pg_dsn, "--schema", schema, *argv],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.serial
def test_poison_rows_never_delay_good_schedules(pg_dsn, old_install, amqp_url):
    schema = old_install
    with connect(pg_dsn, schema, autocommit=True) as old:
        for name, overrides in OLD_BAD:
            old.execute(_insert_sql(name, overrides))
    with connect(pg_dsn, "public") as conn:
        migrate(conn, schema)
    db = connect(pg_dsn, schema, autocommit=True)
    refused = 0
    for i, overrides in enumerate(REFUSED):
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(_insert_sql(f"refused-{i}", overrides))
        refused += 1
    for i, fields in enumerate(API_BAD):
        with pytest.raises(ScheduleError):
            api.create(db, f"api-bad-{i}", "rl.record", **fields)
    start = db.execute("SELECT date_trunc('second', now()) + interval '4 seconds' AS t").fetchone()["t"]
    good = [api.create(db, f"good-{i:02d}", "rl.record", cron="* * * * * *", args=[f"good-{i}"],
                       start=start)["id"] for i in range(GOOD)]
    env, queue = prepare(db, pg_dsn, schema, amqp_url, extra={"runledger_defer_seconds": 1})
    beats = [start_beat(env, f"poison{i}") for i in range(2)]
    worker = start_worker(env, concurrency=4)
    try:
        end = start + timedelta(seconds=WINDOW)
        wait_for(lambda: db.execute("SELECT now() > %s AS done", (end + timedelta(seconds=2),)).fetchone()["done"],
                 timeout=WINDOW + 30, interval=0.5, message="the test window")
        assert all(b.alive() for b in beats), beats[0].log()[-3000:]
        rows = db.execute("SELECT schedule_id, scheduled_for, sent_at FROM jobs WHERE schedule_id = ANY(%s)"
                          " AND scheduled_for < %s", ([uuid.UUID(g) for g in good], end)).fetchall()
        assert len(rows) == GOOD * WINDOW  # every slot of every good schedule, once
        assert len({(r["schedule_id"], r["scheduled_for"]) for r in rows}) == len(rows)
        lags = sorted((r["sent_at"] - r["scheduled_for"]).total_seconds() for r in rows)
        p99 = lags[int(len(lags) * 0.99) - 1]
        print(f"poison: {len(rows)} good fires, p50 {lags[len(lags) // 2] * 1000:.1f} ms, "
              f"p99 {p99 * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms")
        assert lags[0] >= 0 and p99 <= 0.25
        faults = {r["name"]: r for r in db.execute(
            "SELECT s.name, q.failures, q.last_error, q.quarantined_at FROM job_schedules s"
            " JOIN schedule_faults q ON q.schedule_id = s.id").fetchall()}
        for name, _ in OLD_BAD:
            assert name in faults and faults[name]["quarantined_at"] is not None, (name, faults.get(name))
        assert db.execute("SELECT count(*) AS n FROM jobs WHERE schedule_name LIKE 'cron-%%'"
                          " OR schedule_name LIKE 'zone-%%'").fetchone()["n"] == 0
        listed = _cli(pg_dsn, schema, "list", "--json")
        assert listed.returncode == 0, listed.stderr
        quarantined = [s for s in json.loads(listed.stdout) if s["quarantined_at"]]
        assert len(quarantined) == len(OLD_BAD)
        assert _cli(pg_dsn, schema, "show", "zone-mars").returncode == 0
        assert _cli(pg_dsn, schema, "stats", "--json").returncode == 0
        assert refused == len(REFUSED)
    finally:
        for b in beats:
            b.stop()
        worker.stop()
        db.close()
        delete_queue(amqp_url, queue)
