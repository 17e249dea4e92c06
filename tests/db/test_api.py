"""The Python API, including use inside the caller's own transaction."""

from __future__ import annotations

import pytest

from runledger_beat import api
from runledger_beat.db import connect
from runledger_beat.errors import ScheduleError


def test_callers_transaction_rolled_back(pg_dsn, schema, db):
    with connect(pg_dsn, schema) as conn:
        api.create(conn, "tx", "t.x", every="1m")
        assert api.get(conn, "tx") is not None
        conn.rollback()
    assert api.get(db, "tx") is None


def test_cursor_kept_unless_timing_changes(pg_dsn, schema, db):
    first = api.upsert(pg_dsn, "c", "t.x", cron="0 * * * *", schema=schema)
    same = api.upsert(db, "c", "t.y", cron="0 * * * *", kwargs={"a": 1})
    assert same["next_fire_at"] == first["next_fire_at"] and same["task"] == "t.y"
    moved = api.update(db, "c", cron="30 * * * *")
    assert moved["next_fire_at"] != first["next_fire_at"]
    with pytest.raises(ScheduleError) as err:
        api.update(db, "missing", task="t")
    assert err.value.field == "name"
    with pytest.raises(ScheduleError) as err:
        api.upsert(db, "o", "t.x", every=5, overlap="queue")
    assert err.value.field == "overlap"
