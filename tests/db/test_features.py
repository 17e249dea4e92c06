"""Schedule features: pause notes, the audit log, backfill, skip dates and calendars."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta

import psycopg
import pytest

from runledger_beat import api, cli
from runledger_beat.beat.claim import run_pass
from runledger_beat.db import connect
from runledger_beat.db.beat_store import BeatStore
from runledger_beat.errors import ScheduleError
from runledger_beat.settings import DEFAULT_RETENTION_SECONDS
from runledger_beat.timing.engine import MAX_SKIPPED_DAYS, Timing, advance, fire_times, format_rfc3339, jitter_seconds

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.services import wait_for


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
        assert run_pass(BeatStore(beat_conn), 100).claimed == 1
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
    store = BeatStore(db)
    assert store.prune_audit(DEFAULT_RETENTION_SECONDS) == 1
    assert [e["operation"] for e in api.audit(db)] == ["UPDATE"]
    assert store.prune_audit(0) == 1 and api.audit(db) == []


def test_truncate_is_audited_with_every_schedule_it_removed(capsys, db, pg_dsn, schema):
    api.create(pg_dsn, "nightly", "t.x", cron="0 3 * * *", schema=schema)
    api.create(pg_dsn, "often", "t.y", every=60, schema=schema)
    db.execute("SET application_name = 'psql-by-hand'")
    with pytest.raises(psycopg.errors.Error), db.transaction():  # rolled back: nothing truncated or logged
        db.execute("TRUNCATE job_schedules CASCADE")
        db.execute("SELECT 1 / 0")
    assert [e["operation"] for e in api.audit(pg_dsn, schema=schema)] == ["INSERT", "INSERT"]
    assert db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"] == 2
    db.execute("TRUNCATE job_schedules CASCADE")  # jobs references it: CASCADE empties the ledger too
    assert db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"] == 0
    gone = api.audit(pg_dsn, schema=schema)[2:]
    assert [(e["operation"], e["schedule_name"]) for e in gone] == [("TRUNCATE", "nightly"), ("TRUNCATE", "often")]
    assert all(e["after"] is None and e["application_name"] == "psql-by-hand" for e in gone)
    assert gone[0]["before"]["cron_expr"] == "0 3 * * *" and gone[1]["before"]["interval_seconds"] == 60
    assert str(gone[0]["schedule_id"]) == gone[0]["before"]["id"]
    code, out, _ = run(capsys, pg_dsn, schema, "audit", "nightly")
    assert code == 0 and "TRUNCATE" in out


# -- backfill -------------------------------------------------------------------------------


def test_backfill_records_each_missing_slot_once_like_a_normal_fire(capsys, db, pg_dsn, schema):
    api.create(db, "tenmin", "t.x", cron="*/10 * * * *", args=[1], kwargs={"k": "v"}, options={"queue": "q"})
    sid = api.get(db, "tenmin")["id"]
    # One slot already fired normally: the backfill leaves it alone.
    db.execute("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload, status)"
               " VALUES (gen_random_uuid(), %s, '2026-01-01T10:20:00Z', 't.x', '{}', 'success')", (sid,))
    code, out, err = run(capsys, pg_dsn, schema, "backfill", "tenmin", "--from", "2026-01-01T10:00:00Z",
                         "--to", "2026-01-01T11:00:00Z", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["slots"], result["created"], result["existing"]) == (6, 5, 1)
    rows = db.execute("SELECT * FROM jobs WHERE backfill ORDER BY scheduled_for").fetchall()
    assert [r["scheduled_for"].strftime("%H:%M") for r in rows] == ["10:00", "10:10", "10:30", "10:40", "10:50"]
    assert [str(r["id"]) for r in rows] == result["ids"]
    first = rows[0]
    assert first["stage"] == "scheduled" and first["status"] == "pending" and first["options"] == {"queue": "q"}
    assert first["payload"] == {"args": [1], "kwargs": {"k": "v"}, "_schedule": {
        "schedule_id": sid, "schedule_name": "tenmin", "scheduled_for": "2026-01-01T10:00:00Z"}}
    (latest,) = api.history(db, "tenmin", limit=1)
    assert latest["backfill"] is True and latest["released_at"] is None
    again = api.backfill(pg_dsn, "tenmin", "2026-01-01T10:00:00Z", "2026-01-01T11:00:00Z", schema=schema)
    assert (again["slots"], again["created"], again["existing"], again["ids"]) == (6, 0, 6, [])
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 6


def test_backfill_over_the_cap_exits_2_and_writes_nothing(capsys, db, pg_dsn, schema):
    api.create(db, "minutely", "t.x", cron="* * * * *", timezone="Europe/Berlin")
    code, out, err = run(capsys, pg_dsn, schema, "backfill", "minutely", "--from", "2026-01-01T10:00",
                         "--to", "2026-01-01T11:00", "--max", "59")
    assert code == 2 and err.startswith("error: max: more than 59 slots")
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    result = api.backfill(db, "minutely", "2026-01-01T10:00", "2026-01-01T11:00", max_slots=60)
    assert result["created"] == 60 and result["from"].isoformat() == "2026-01-01T10:00:00+01:00"
    for bad, field in ((("2026-01-01T11:00", "2026-01-01T10:00"), "to"), (("2999-01-01", "2999-01-02"), "to"),
                       (("yesterday", "2026-01-01"), "from")):
        with pytest.raises(api.ScheduleError) as err:
            api.backfill(db, "minutely", *bad)
        assert err.value.field == field
    with pytest.raises(api.ScheduleError) as err:
        api.backfill(db, "nope", "2026-01-01", "2026-01-02")
    assert err.value.field == "name"


def test_a_running_beat_publishes_backfilled_rows_promptly(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)  # the default recovery grace: a timed sweep only every 10 s
    api.create(db, "hourly", "rl.record", cron="0 * * * *", args=["hourly"])
    api.create(db, "busy", "rl.record", cron="* * * * * *", args=["busy"])  # beat moves its cursor every second
    beat = start_beat(env)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'busy'"
                                   " AND status = 'sent'") >= 2, timeout=20, message="beat at work")
        result = api.backfill(pg_dsn, "hourly", "2026-01-01T00:00:00Z", "2026-01-01T06:00:00Z", schema=schema)
        assert result["created"] == 6
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE backfill AND status = 'sent'") == 6,
                 timeout=8, message="the backfilled rows to be published")
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
    lag = db.execute("SELECT max(sent_at - created_at) AS m FROM jobs WHERE backfill").fetchone()["m"]
    assert lag.total_seconds() < 3  # the NOTIFY brought the outbox sweep forward
    # Beat's own cursor moves of "busy" are not in the audit log: only its creation is.
    assert [e["operation"] for e in api.audit(db, "busy")] == ["INSERT"]


# -- skip dates and calendars -------------------------------------------------------------

BERLIN_DST = ["--cron", "30 2 * * *", "--tz", "Europe/Berlin", "--after", "2026-03-27T12:00:00Z", "--count", "4",
              "--json"]


def _fires(timing, after, n=4):
    return [format_rfc3339(f) for f in fire_times(timing, datetime.fromisoformat(after), uuid.UUID(int=0), n)]


def test_skip_dates_across_the_spring_dst_change_in_berlin():
    daily = Timing("cron", cron="30 2 * * *", timezone="Europe/Berlin").validate()
    # 2026-03-29 is the last Sunday of March: 02:30 does not exist and fires right after the gap, at 03:00 CEST.
    assert _fires(daily, "2026-03-27T12:00:00+00:00") == [
        "2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"]
    skip_dst_day = replace(daily, skip_dates=frozenset({date(2026, 3, 29)})).validate()
    assert _fires(skip_dst_day, "2026-03-27T12:00:00+00:00") == [
        "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z", "2026-04-01T00:30:00Z"]
    around = replace(daily, skip_dates=frozenset({date(2026, 3, 28), date(2026, 3, 30)})).validate()
    assert _fires(around, "2026-03-27T12:00:00+00:00", 3) == [
        "2026-03-29T01:00:00Z", "2026-03-31T00:30:00Z", "2026-04-01T00:30:00Z"]
    # The cursor moves past an excluded date (advance), and a due slot on one is not fired by the beat.
    step = advance(skip_dst_day, datetime(2026, 3, 28, 1, 30, tzinfo=UTC), datetime(2026, 3, 28, 1, 30, tzinfo=UTC),
                   uuid.UUID(int=0))
    assert step.fire and format_rfc3339(step.next_fire_at) == "2026-03-30T00:30:00Z"
    # Hourly in a zone: the whole local day (23 hours on the DST day) is skipped, midnight to midnight.
    hourly = Timing("cron", cron="0 * * * *", timezone="Europe/Berlin",
                    skip_dates=frozenset({date(2026, 3, 29)})).validate()
    assert _fires(hourly, "2026-03-28T21:30:00+00:00", 3) == [
        "2026-03-28T22:00:00Z", "2026-03-29T22:00:00Z", "2026-03-29T23:00:00Z"]
    every_day_excluded = replace(daily, skip_dates=frozenset(date(2026, 1, 1) + timedelta(days=i)
                                                             for i in range(MAX_SKIPPED_DAYS + 1))).validate()
    with pytest.raises(ScheduleError) as err:
        _fires(every_day_excluded, "2025-12-31T12:00:00+00:00", 1)
    assert err.value.field == "skip_dates"


def test_preview_skip_dates(capsys):
    assert cli.main(["preview", *BERLIN_DST, "--skip-dates", "2026-03-29,2026-03-31"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        "2026-03-28T01:30:00Z", "2026-03-30T00:30:00Z", "2026-04-01T00:30:00Z", "2026-04-02T00:30:00Z"]
    assert cli.main(["preview", *BERLIN_DST, "--skip-dates", "2026-02-30"]) == 2
    assert "error: skip_dates: invalid date '2026-02-30'" in capsys.readouterr().err


def test_skip_dates_and_calendars_on_add_update_show_and_the_beat(capsys, db, pg_dsn, schema):
    code, out, err = run(capsys, pg_dsn, schema, "calendar", "add", "holidays", "--dates", "2099-12-25,2099-12-26",
                         "--json")
    assert code == 0, err
    assert json.loads(out)["dates"] == ["2099-12-25", "2099-12-26"]
    assert run(capsys, pg_dsn, schema, "calendar", "add", "holidays", "--dates", "2099-01-01")[0] == 0
    code, out, err = run(capsys, pg_dsn, schema, "add", "xmas", "--task", "t.x", "--cron", "0 9 * * *",
                         "--tz", "Europe/Berlin", "--start", "2099-12-24T00:00:00", "--skip-dates", "2099-12-24",
                         "--calendar", "holidays", "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["skip_dates"] == ["2099-12-24"] and row["calendar"] == "holidays"
    assert row["next_fire_at"] == "2099-12-27T08:00:00Z"  # 24th own date, 25th and 26th from the calendar
    code, out, _ = run(capsys, pg_dsn, schema, "show", "xmas", "--json")
    assert json.loads(out)["next_fires"][:3] == ["2099-12-27T08:00:00Z", "2099-12-28T08:00:00Z",
                                                 "2099-12-29T08:00:00Z"]
    code, out, _ = run(capsys, pg_dsn, schema, "calendar", "list", "--json")
    assert json.loads(out) == [dict(json.loads(out)[0], name="holidays", schedules=["xmas"],
                                    dates=["2099-01-01", "2099-12-25", "2099-12-26"])]
    code, _, err = run(capsys, pg_dsn, schema, "calendar", "remove", "holidays")
    assert code == 2 and "used by xmas" in err
    code, out, _ = run(capsys, pg_dsn, schema, "update", "xmas", "--calendar", "", "--skip-dates", "", "--json")
    assert json.loads(out)["next_fire_at"] == "2099-12-24T08:00:00Z" and json.loads(out)["calendar"] is None
    assert run(capsys, pg_dsn, schema, "calendar", "remove", "holidays")[0] == 0
    code, _, err = run(capsys, pg_dsn, schema, "update", "xmas", "--calendar", "nope")
    assert code == 2 and err.startswith("error: calendar: no calendar named 'nope'")

    # The beat: a calendar date added after the cursor was set is passed over without a fire.
    api.add_calendar(db, "today", [db.execute("SELECT (now() AT TIME ZONE 'UTC')::date AS d").fetchone()["d"]])
    api.create(db, "due", "t.x", cron="0 * * * *", calendar="today")  # today excluded: the next fire is tomorrow
    assert api.get(db, "due")["next_fire_at"].date() > datetime.now(UTC).date()
    db.execute("UPDATE job_schedules SET next_fire_at = now() - interval '1 second' WHERE name = 'due'")
    assert run_pass(BeatStore(db), 10).claimed == 1
    assert db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"] == 0
    assert api.get(db, "due")["next_fire_at"].date() > datetime.now(UTC).date()


def test_a_one_off_schedule_refuses_skip_dates(db):
    with pytest.raises(ScheduleError) as err:
        api.create(db, "once", "t.x", at="2099-01-01T00:00:00Z", skip_dates="2099-01-01")
    assert err.value.field == "skip_dates"


def test_skip_dates_apply_to_slots_so_jitter_never_drops_a_fire():
    timing = Timing("cron", cron="59 23 * * *", max_jitter=600, skip_dates=frozenset({date(2026, 1, 2)})).validate()
    sid = uuid.UUID(int=7)
    fires = fire_times(timing, datetime(2026, 1, 1, tzinfo=UTC), sid, 3)
    # Slots are 23:59 each day, fires up to 10 minutes later: Jan 2's slot is skipped, Jan 1's is kept
    # even when its jitter carries the fire into Jan 2.
    slots = [datetime.combine(d, datetime.min.time(), UTC) + timedelta(hours=23, minutes=59)
             for d in (date(2026, 1, 1), date(2026, 1, 3), date(2026, 1, 4))]
    assert fires == [s + timedelta(seconds=jitter_seconds(sid, s, 600)) for s in slots]
    assert not timing.excludes_fire(datetime(2026, 1, 2, 0, 5, tzinfo=UTC))  # slot on Jan 1 + jitter
    assert timing.excludes_fire(datetime(2026, 1, 2, 12, 0, tzinfo=UTC))
