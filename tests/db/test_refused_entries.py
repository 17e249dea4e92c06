"""beat_schedule entries runledger cannot store are refused loudly: sync exits 2 naming each (nothing
written) unless --skip-invalid, beat logs one error per entry at start, doctor lists them."""

from __future__ import annotations

import json
import logging

from runledger_beat import api, cli
from runledger_beat.importer import sync_beat_schedule
from tests.support.refused_app import app

APP = "tests.support.refused_app:app"


def test_sync_exits_2_naming_each_refused_entry_and_writes_nothing(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "--app", APP, "sync"])
    out = capsys.readouterr().out
    assert code == 2
    assert "refused: beat_schedule['sunrise']: solar schedules are not supported" in out
    assert "refused: beat_schedule['moon']: custom schedule class tests.support.refused_app.EveryFullMoon" in out
    assert "nothing written" in out and api.list_schedules(db) == []


def test_sync_skip_invalid_imports_the_rest_and_still_names_them(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "--app", APP, "sync", "--skip-invalid", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (report["created"], sorted(report["refused"]), report["written"]) == (2, ["moon", "sunrise"], True)
    assert {s["name"]: s["cron"] for s in api.list_schedules(db)} == {"weekly": "0 7 * * 1", "spread": "0 * * * 0,2-6"}
    assert api.get(db, "weekly")["timezone"] == "Europe/Paris"


def test_beat_start_logs_one_error_per_refused_entry(db, caplog):
    """What beat runs at start (skip_invalid): the others are imported, each refusal is one ERROR line."""
    with caplog.at_level(logging.ERROR, logger="runledger_beat"):
        report = sync_beat_schedule(db, app, app.conf.beat_schedule)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert report["created"] == 2 and len(errors) == 2
    assert any("beat_schedule['sunrise']" in e for e in errors) and any("beat_schedule['moon']" in e for e in errors)


def test_doctor_lists_the_refused_entries(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "--app", APP, "doctor", "--json"])
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert code == 1 and checks["beat_schedule"]["verdict"] == "FAIL"
    assert "2 of 4 entries refused" in checks["beat_schedule"]["detail"]
    assert "beat_schedule['sunrise']" in checks["beat_schedule"]["detail"]
    assert "beat_schedule['moon']" in checks["beat_schedule"]["detail"]


def test_sync_dry_run_counts_and_writes_nothing(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "--app", APP, "sync", "--dry-run", "--skip-invalid",
                     "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and (report["created"], report["written"]) == (2, False) and len(report["refused"]) == 2
    assert api.list_schedules(db) == []
