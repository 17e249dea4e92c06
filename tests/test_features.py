"""Schedule features (issue 14): pause notes, the audit log, backfill, skip dates and calendars."""

from __future__ import annotations

import json

import pytest

from runledger_beat import api, cli
from runledger_beat.db import connect


def run(capsys, pg_dsn, schema, *argv):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, *argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- pause notes ----------------------------------------------------------------------


def test_pause_note_is_kept_with_when_and_who_shown_and_cleared_by_resume(capsys, db, pg_dsn, schema):
    api.create(db, "nightly", "t.x", cron="0 3 * * *")
    code, out, err = run(capsys, pg_dsn, schema, "pause", "nightly", "--note", "db migration until Friday", "--json")
    assert code == 0, err
    row = json.loads(out)
    role = db.execute("SELECT current_user AS u").fetchone()["u"]
    assert row["active"] is False and row["pause_note"] == "db migration until Friday"
    assert row["paused_by"] == role and row["paused_by_application"] == cli.CLI_APPLICATION_NAME
    assert row["paused_at"].endswith("Z")
    code, out, _ = run(capsys, pg_dsn, schema, "list")
    assert "note=db migration until Friday" in out and f"by {role} (runledger-beat)" in out
    code, out, _ = run(capsys, pg_dsn, schema, "show", "nightly")
    assert "pause_note: db migration until Friday" in out
    code, out, _ = run(capsys, pg_dsn, schema, "show", "nightly", "--json")
    assert json.loads(out)["schedule"]["paused_by"] == role
    code, out, _ = run(capsys, pg_dsn, schema, "list", "--json")
    assert json.loads(out)[0]["pause_note"] == "db migration until Friday"
    code, out, _ = run(capsys, pg_dsn, schema, "resume", "nightly", "--json")
    row = json.loads(out)
    assert row["active"] is True and row["next_fire_at"]
    assert (row["pause_note"], row["paused_at"], row["paused_by"], row["paused_by_application"]) == (None,) * 4


def test_api_pause_note_records_the_sessions_application_name(pg_dsn, schema):
    with connect(pg_dsn, schema, application_name="ops-console") as conn:
        api.create(conn, "n", "t.x", every=60)
        row = api.pause(conn, "n", note="  noisy  ")
        conn.commit()
    assert row["pause_note"] == "noisy" and row["paused_by_application"] == "ops-console"
    assert row["paused_at"] is not None and row["next_fire_at"] is None
    assert api.pause(pg_dsn, "n", schema=schema)["pause_note"] is None  # pausing again without a note
    row = api.update(pg_dsn, "n", active=True, schema=schema)  # activating by update clears it too
    assert row["active"] and row["paused_at"] is None
    with pytest.raises(api.ScheduleError) as err:
        api.pause(pg_dsn, "n", note="x" * 2001, schema=schema)
    assert err.value.field == "note"
    assert api.get(pg_dsn, "n", schema=schema)["active"] is True  # nothing written
