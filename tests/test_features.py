"""Schedule features (issue 14): pause notes, the audit log, backfill, skip dates and calendars."""

from __future__ import annotations

import json

import pytest

from runledger_beat import api, cli
from runledger_beat.db import connect
from runledger_beat.materialize import run_pass
from runledger_beat.store import Store


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


# -- the audit log ----------------------------------------------------------------------


def test_audit_records_api_cli_and_raw_sql_changes_but_not_beats_cursor_moves(capsys, db, pg_dsn, schema):
    role = db.execute("SELECT current_user AS u").fetchone()["u"]
    api.create(pg_dsn, "audited", "t.x", every=1, schema=schema)                        # API: INSERT
    assert run(capsys, pg_dsn, schema, "update", "audited", "--every", "2s")[0] == 0     # CLI: UPDATE
    db.execute("SET application_name = 'psql-by-hand'")
    db.execute("UPDATE job_schedules SET max_jitter_seconds = 1 WHERE name = 'audited'")  # raw SQL
    db.execute("UPDATE job_schedules SET updated_at = now() WHERE name = 'audited'")  # no real change
    db.execute("UPDATE job_schedules SET next_fire_at = now() - interval '1 second' WHERE name = 'audited'")
    marks = len(api.audit(pg_dsn, "audited", schema=schema))
    with connect(pg_dsn, schema) as beat_conn:  # beat's own pass: record the fire, move the cursor
        assert run_pass(Store(beat_conn), 100).claimed == 1
        beat_conn.commit()
    moved = db.execute("SELECT next_fire_at > now() AS ok, last_fired_at IS NOT NULL AS fired FROM job_schedules"
                       " WHERE name = 'audited'").fetchone()
    assert moved == {"ok": True, "fired": True}
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 1
    entries = api.audit(pg_dsn, "audited", schema=schema)
    assert len(entries) == marks == 4  # the passes added nothing, nor did the updated_at-only UPDATE
    insert, cli_update, raw, cursor = entries
    assert insert["operation"] == "INSERT" and insert["before"] is None and insert["after"]["interval_seconds"] == 1
    assert insert["application_name"] == "runledger_beat" and insert["who"] == role
    assert cli_update["operation"] == "UPDATE" and cli_update["application_name"] == "runledger-beat"
    assert cli_update["before"]["interval_seconds"] == 1 and cli_update["after"]["interval_seconds"] == 2
    assert "name" not in cli_update["after"] and "updated_at" not in cli_update["after"]
    assert raw["application_name"] == "psql-by-hand"
    assert raw["before"] == {"max_jitter_seconds": 0} and raw["after"] == {"max_jitter_seconds": 1}
    assert set(cursor["after"]) == {"next_fire_at"}
    assert all(e["schedule_id"] == insert["after"]["id"] for e in entries)

    code, out, _ = run(capsys, pg_dsn, schema, "audit", "audited", "--since", "1h", "--json")
    assert code == 0 and [e["operation"] for e in json.loads(out)] == ["INSERT", "UPDATE", "UPDATE", "UPDATE"]
    code, out, _ = run(capsys, pg_dsn, schema, "audit")
    assert "max_jitter_seconds: 0 -> 1" in out and "psql-by-hand" in out and "runledger-beat" in out
    assert run(capsys, pg_dsn, schema, "remove", "audited")[0] == 0
    (gone,) = api.audit(pg_dsn, "audited", since="1m", schema=schema)[-1:]
    assert gone["operation"] == "DELETE" and gone["after"] is None and gone["before"]["name"] == "audited"
    assert run(capsys, pg_dsn, schema, "audit", "--since", "soon")[0] == 2


def test_prune_audit_drops_entries_older_than_the_retention(db):
    api.create(db, "a", "t.x", every=60)
    db.execute("UPDATE schedule_changes SET at = now() - interval '31 days'")
    api.update(db, "a", every=120)
    store = Store(db)
    assert store.prune_audit() == 1
    assert [e["operation"] for e in api.audit(db)] == ["UPDATE"]
    assert store.prune_audit(0) == 1 and api.audit(db) == []
