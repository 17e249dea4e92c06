"""`runledger-beat import-from django-celery-beat`: a real Django project migrated by django-celery-beat's own
migrations (into a schema of the test's own: no CREATE/DROP DATABASE, which a busy shared server can stall for
minutes), one PeriodicTask of each kind saved through its models, brought across field by field; a second
run changes nothing; --dry-run writes nothing; the source is only read."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from runledger_beat import api, cli

ROOT = Path(__file__).resolve().parents[2]
UTC = timezone.utc


@pytest.fixture
def dcb(pg_dsn):
    """(dsn, schema): a schema of the test's own, migrated by django-celery-beat's own migrations in a real
    Django project and holding each PeriodicTask kind; dropped after."""
    name = f"dcb_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    try:
        subprocess.run([sys.executable, "-m", "tests.support.dcb_project"], cwd=ROOT, check=True, timeout=120,
                       env={**os.environ, "RUNLEDGER_DCB_DSN": pg_dsn, "RUNLEDGER_DCB_SCHEMA": name,
                            "DJANGO_SETTINGS_MODULE": "tests.support.dcb_settings"})
        yield pg_dsn, name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


def run(capsys, pg_dsn, schema, source, *argv):
    dsn, source_schema = source
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "import-from", "django-celery-beat", dsn,
                     "--source-schema", source_schema, *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def source_conn(source):
    conn = psycopg.connect(source[0])
    conn.execute(f'SET search_path TO "{source[1]}"')
    return conn


def source_rows(source):
    with source_conn(source) as conn:
        return conn.execute("SELECT to_jsonb(t) FROM django_celery_beat_periodictask t ORDER BY id").fetchall()


ALL = ["campaign", "first monday", "new year", "once later", "report", "switched off"]


def test_each_periodic_task_kind_comes_across_field_by_field(capsys, pg_dsn, schema, db, dcb):
    before = source_rows(dcb)
    code, plan = run(capsys, pg_dsn, schema, dcb, "--dry-run", "--skip-invalid")
    assert code == 0 and plan["dry_run"] and not plan["written"]
    assert sorted(plan["created"]) == ALL and plan["refused"] == {
        "sunrise": "solar schedules are not supported (they follow the sun, not a clock)"}
    assert api.list_schedules(db) == []

    code, refused = run(capsys, pg_dsn, schema, dcb)
    assert code == 2 and not refused["written"] and "sunrise" in refused["refused"]
    assert api.list_schedules(db) == []

    code, report = run(capsys, pg_dsn, schema, dcb, "--skip-invalid")
    assert code == 0 and report["written"] and sorted(report["created"]) == ALL
    got = {s["name"]: s for s in api.list_schedules(db)}
    assert sorted(got) == ALL

    report_ = got["report"]
    assert (report_["kind"], report_["every"], report_["task"]) == ("interval", 600.0, "proj.report")
    assert (report_["args"], report_["kwargs"]) == ([1, "two"], {"k": "v", "n": [1, 2]})
    assert report_["options"] == {"queue": "reports", "exchange": "reports-x", "routing_key": "rk.report",
                                  "priority": 5, "expires": 120.0, "headers": {"team": "data"}}
    assert report_["active"] and report_["source"] == "api"

    monday = got["first monday"]
    assert (monday["cron"], monday["day_and"], monday["timezone"]) == ("0 8 1-7 * 1", True, "Europe/Berlin")
    fires = api.next_fires(db, "first monday", 3)
    assert all(f.astimezone(UTC).weekday() == 0 and f.day <= 7 for f in fires)

    new_year = got["new year"]
    assert (new_year["kind"], new_year["at"]) == ("once", datetime(2030, 1, 1, 12, tzinfo=UTC))

    assert got["switched off"]["active"] is False and got["switched off"]["every"] == 600.0

    campaign = got["campaign"]
    assert (campaign["cron"], campaign["day_and"], campaign["timezone"]) == ("0,30 9-17 * * 1-5", True, "UTC")
    assert (campaign["start"], campaign["end"]) == (datetime(2030, 3, 1, tzinfo=UTC), datetime(2030, 6, 1, tzinfo=UTC))

    once = got["once later"]
    assert (once["kind"], once["at"]) == ("once", datetime(2030, 5, 5, 5, 5, tzinfo=UTC))

    stamps = {s["name"]: (s["updated_at"], s["next_fire_at"]) for s in api.list_schedules(db)}
    code, again = run(capsys, pg_dsn, schema, dcb, "--skip-invalid")
    assert code == 0 and again["created"] == again["updated"] == [] and sorted(again["unchanged"]) == ALL
    assert not again["written"]
    assert {s["name"]: (s["updated_at"], s["next_fire_at"]) for s in api.list_schedules(db)} == stamps
    assert source_rows(dcb) == before


def test_a_change_at_the_source_is_an_update_and_dry_run_leaves_it(capsys, pg_dsn, schema, db, dcb):
    assert run(capsys, pg_dsn, schema, dcb, "--skip-invalid")[0] == 0
    with source_conn(dcb) as conn:
        conn.execute("UPDATE django_celery_beat_periodictask SET queue = 'urgent' WHERE name = 'report'")
    code, plan = run(capsys, pg_dsn, schema, dcb, "--skip-invalid", "--dry-run")
    assert code == 0 and plan["updated"] == ["report"] and api.get(db, "report")["options"]["queue"] == "reports"
    code, report = run(capsys, pg_dsn, schema, dcb, "--skip-invalid")
    assert report["updated"] == ["report"] and api.get(db, "report")["options"]["queue"] == "urgent"


def test_a_schema_without_its_tables_is_a_clear_error(capsys, pg_dsn, schema):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "import-from", "django-celery-beat", pg_dsn,
                     "--source-schema", schema])
    assert code == 2
    assert "no django_celery_beat_periodictask table in that schema" in capsys.readouterr().err


def test_an_older_django_celery_beat_without_clocked_headers_or_expire_seconds(capsys, pg_dsn, schema, db, dcb):
    """Tables of a django-celery-beat before clocked schedules, headers, priority and expire_seconds: read too."""
    with source_conn(dcb) as conn:
        conn.execute("DELETE FROM django_celery_beat_periodictask WHERE clocked_id IS NOT NULL")
        for column in ("clocked_id", "headers", "priority", "expire_seconds"):
            conn.execute(f"ALTER TABLE django_celery_beat_periodictask DROP COLUMN {column}")
        conn.execute("DROP TABLE django_celery_beat_clockedschedule")
        conn.execute("ALTER TABLE django_celery_beat_crontabschedule DROP COLUMN timezone")
    code, report = run(capsys, pg_dsn, schema, dcb, "--skip-invalid")
    assert code == 0 and sorted(report["created"]) == [n for n in ALL if n != "new year"]
    assert api.get(db, "report")["options"] == {"queue": "reports", "exchange": "reports-x",
                                                "routing_key": "rk.report"}
    assert api.get(db, "first monday")["timezone"] == "UTC"


def test_an_unreachable_source_hides_its_password(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "import-from", "django-celery-beat",
                     "postgresql://u:hunter2@127.0.0.1:1/django"])
    err = capsys.readouterr().err
    assert code == 1 and "source database" in err and "hunter2" not in err
