"""The seed's database behaviours, on a real Postgres (no broker involved)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from runledger_beat.beat.claim import ClaimedScheduleMissing, claim_due, record_claimed, run_pass
from runledger_beat.db import connect
from runledger_beat.db.beat_store import BeatStore

from ..support.rows import insert_schedule, ledger


@pytest.fixture
def tx(pg_dsn, schema):
    """A non-autocommit connection for scheduling passes."""
    conn = connect(pg_dsn, schema)
    yield BeatStore(conn)
    conn.close()


def test_stale_cursor_gives_one_catch_up_row_then_nothing(db, tx):
    sid = insert_schedule(db, "stale", cron="0 * * * * *", next_fire_at="2026-02-01T00:00:00Z")
    first = run_pass(tx, 100)
    assert len(first.fires) == 1
    rows = ledger(db, sid)
    assert [r["scheduled_for"] for r in rows] == [datetime(2026, 2, 1, tzinfo=timezone.utc)]
    cursor = db.execute("SELECT next_fire_at, now() AS now FROM job_schedules WHERE id = %s", (sid,)).fetchone()
    assert cursor["next_fire_at"] > cursor["now"]
    second = run_pass(tx, 100)
    assert second.claimed == 0 and len(ledger(db, sid)) == 1


def test_schedule_metadata_is_formatted_exactly(db, tx):
    sid = insert_schedule(db, "meta", cron="0 * * * * *", next_fire_at="2026-02-01T00:00:00Z")
    run_pass(tx, 100)
    (row,) = ledger(db, sid)
    assert row["payload"]["_schedule"] == {
        "schedule_id": str(sid), "schedule_name": "meta", "scheduled_for": "2026-02-01T00:00:00Z"}
    assert row["payload"]["args"] == ["meta"] and row["stage"] == "scheduled" and row["status"] == "pending"


def test_non_object_template_is_wrapped(db, tx):
    # Migration 0002 refuses such templates; a row written before it is still fired, wrapped.
    db.execute("ALTER TABLE job_schedules DROP CONSTRAINT job_schedules_payload_template_valid")
    sid = insert_schedule(db, "wrapped", template=[1, 2, 3], next_fire_at="2026-02-01T00:00:00Z")
    run_pass(tx, 100)
    (row,) = ledger(db, sid)
    assert row["payload"]["payload"] == [1, 2, 3]
    assert row["payload"]["_schedule"]["schedule_name"] == "wrapped"


def test_invalid_cron_is_deferred_and_others_still_fire(db, tx):
    bad = insert_schedule(db, "bad", cron="61 * * * *")
    good = insert_schedule(db, "good")
    result = run_pass(tx, 100)
    assert result.deferred == 1 and len(result.fires) == 1
    assert ledger(db, bad) == [] and len(ledger(db, good)) == 1
    fault = db.execute("SELECT retry_at - now() AS d, failures, last_error, quarantined_at FROM schedule_faults"
                       " WHERE schedule_id = %s", (bad,)).fetchone()
    assert timedelta(seconds=29) < fault["d"] <= timedelta(seconds=30)
    assert fault["failures"] == 1 and fault["last_error"].startswith("cron:") and fault["quarantined_at"] is None


def test_unknown_zone_is_deferred(db, tx):
    bad = insert_schedule(db, "mars", tz="Mars/Olympus")
    result = run_pass(tx, 100)
    assert result.deferred == 1 and ledger(db, bad) == []


def test_failing_schedules_filling_a_batch_do_not_starve_a_valid_one(db, tx):
    for i in range(5):
        insert_schedule(db, f"bad{i}", cron="not a cron", next_fire_at="2026-01-01T00:00:00Z")
    good = insert_schedule(db, "good", next_fire_at="2026-01-02T00:00:00Z")
    first = run_pass(tx, 5)
    assert first.claimed == 5 and first.deferred == 5 and ledger(db, good) == []
    second = run_pass(tx, 5)
    assert len(second.fires) == 1 and len(ledger(db, good)) == 1


def test_claimed_row_deleted_mid_batch_rolls_the_batch_back(db, tx):
    a = insert_schedule(db, "a")
    b = insert_schedule(db, "b")
    with pytest.raises(ClaimedScheduleMissing) as caught, tx.conn.transaction():
        rows = claim_due(tx, 100)
        assert len(rows) == 2
        tx.conn.execute("DELETE FROM job_schedules WHERE id = %s", (b,))
        record_claimed(tx, rows)
    assert caught.value.schedule_id == b
    assert ledger(db) == []
    assert db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"] == 2
    assert db.execute("SELECT last_fired_at FROM job_schedules WHERE id = %s", (a,)).fetchone()["last_fired_at"] is None


def test_two_connections_never_claim_the_same_row(db, pg_dsn, schema):
    for i in range(20):
        insert_schedule(db, f"s{i}")
    one, two = connect(pg_dsn, schema), connect(pg_dsn, schema)
    try:
        with one.transaction():
            mine = {r["id"] for r in claim_due(BeatStore(one), 10)}
            with two.transaction():
                theirs = {r["id"] for r in claim_due(BeatStore(two), 100)}
        assert len(mine) == 10 and len(theirs) == 10 and not mine & theirs
    finally:
        one.close()
        two.close()


def test_unique_slot_constraint_backs_the_locks(db):
    sid = insert_schedule(db, "u")
    insert = ("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload)"
              " VALUES (%s, %s, '2026-02-01T00:00:00Z', 'rl.record', '{}')")
    db.execute(insert, (uuid.uuid4(), sid))
    with pytest.raises(psycopg.errors.UniqueViolation):
        db.execute(insert, (uuid.uuid4(), sid))


def test_one_off_deactivates_after_firing(db, tx):
    sid = insert_schedule(db, "once")
    db.execute("UPDATE job_schedules SET kind = 'once', cron_expr = NULL, run_at = next_fire_at WHERE id = %s", (sid,))
    assert len(run_pass(tx, 10).fires) == 1
    row = db.execute("SELECT is_active, next_fire_at FROM job_schedules WHERE id = %s", (sid,)).fetchone()
    assert row == {"is_active": False, "next_fire_at": None}


def test_overlap_skip_records_skipped_while_previous_is_queued(db, tx):
    sid = insert_schedule(db, "ov", overlap="skip")
    assert len(run_pass(tx, 10).fires) == 1
    db.execute("UPDATE job_schedules SET next_fire_at = now() WHERE id = %s", (sid,))
    second = run_pass(tx, 10)
    assert second.fires == [] and second.skipped == 1
    assert [r["status"] for r in ledger(db, sid)] == ["pending", "skipped"]
