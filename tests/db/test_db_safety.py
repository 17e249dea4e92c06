"""db.connect(): one unreadable value never breaks a fetch; search_path, timeouts and keepalives on every connection."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone

import psycopg
import pytest

from runledger_beat import db as rldb
from runledger_beat.db import OUT_OF_RANGE_HIGH, OUT_OF_RANGE_LOW, UNREADABLE_JSON, connect, loaders
from runledger_beat.errors import ConfigError

DEEP = 2000
MANY_ROWS = """
SELECT g,
       CASE g WHEN 10 THEN 'infinity'::timestamptz WHEN 20 THEN '-infinity'::timestamptz
              WHEN 30 THEN '10000-01-01T00:00:00Z'::timestamptz WHEN 40 THEN '0001-01-01 BC'::timestamptz
              ELSE '2026-01-01T00:00:00Z'::timestamptz + g * interval '1 second' END AS tz,
       CASE g WHEN 10 THEN 'infinity'::timestamp WHEN 20 THEN '-infinity'::timestamp
              WHEN 30 THEN '10000-01-01'::timestamp ELSE '2026-01-01'::timestamp END AS naive,
       CASE g WHEN 50 THEN (repeat('[', %(deep)s) || repeat(']', %(deep)s))::jsonb
              WHEN 60 THEN (repeat('{"a":', %(deep)s) || '1' || repeat('}', %(deep)s))::jsonb
              ELSE jsonb_build_object('g', g) END AS j,
       CASE g WHEN 50 THEN (repeat('[', %(deep)s) || repeat(']', %(deep)s))::json ELSE '[1]'::json END AS plain
  FROM generate_series(1, 500) AS g ORDER BY g
"""


@pytest.mark.parametrize("binary", [False, True], ids=["text", "binary"])
def test_many_rows_with_bad_values_all_load(db, binary):
    rows = db.cursor(binary=binary).execute(MANY_ROWS, {"deep": DEEP}).fetchall()
    assert len(rows) == 500
    by_g = {r["g"]: r for r in rows}
    assert by_g[10]["tz"] is not None and by_g[10]["tz"] == OUT_OF_RANGE_HIGH and rldb.is_out_of_range(by_g[10]["tz"])
    assert by_g[20]["tz"] == OUT_OF_RANGE_LOW and by_g[40]["tz"] == OUT_OF_RANGE_LOW
    assert by_g[30]["tz"] == OUT_OF_RANGE_HIGH
    assert by_g[10]["naive"] == datetime.max and by_g[20]["naive"] == datetime.min and by_g[30]["naive"] == datetime.max
    assert all(rldb.is_unreadable(value) for value in (by_g[50]["j"], by_g[60]["j"], by_g[50]["plain"]))
    assert "recursion" in repr(by_g[50]["j"])
    assert by_g[11]["tz"] == datetime(2026, 1, 1, 0, 0, 11, tzinfo=timezone.utc)
    assert not rldb.is_out_of_range(by_g[11]["tz"]) and by_g[11]["j"] == {"g": 11} and by_g[11]["plain"] == [1]
    assert sum(rldb.is_out_of_range(r["tz"]) for r in rows) == 4
    assert sum(rldb.is_unreadable(r["j"]) for r in rows) == 2


def test_ledger_rows_with_bad_values_still_list(db):
    ids = [uuid.uuid4() for _ in range(50)]
    for i, job_id in enumerate(ids):
        payload = "[" * DEEP + "]" * DEEP if i == 7 else '{"args": [], "kwargs": {}}'
        when = "infinity" if i == 3 else "-infinity" if i == 4 else "2026-01-01T00:00:00Z"
        db.execute("INSERT INTO jobs (id, job_type, payload, scheduled_for) VALUES (%s, 'rl.record', %s, %s)",
                   (job_id, payload, when))
    rows = {r["id"]: r for r in db.execute("SELECT * FROM jobs").fetchall()}
    assert len(rows) == 50
    assert rows[ids[3]]["scheduled_for"] == OUT_OF_RANGE_HIGH and rows[ids[4]]["scheduled_for"] == OUT_OF_RANGE_LOW
    assert rows[ids[7]]["payload"] is UNREADABLE_JSON and rldb.is_unreadable(rows[ids[7]]["payload"])
    assert not rows[ids[7]]["payload"]  # falsy, so `payload or {}` style code does not crash either
    assert rows[ids[0]]["payload"] == {"args": [], "kwargs": {}}


def test_invalid_json_text_loads_as_sentinel(db):
    loader = loaders._SAFE_LOADERS[4][1](psycopg.adapters.types["json"].oid, db)
    assert rldb.is_unreadable(loader.load(b"{not json"))
    assert "not valid JSON" in repr(loader.load(b"\xff")) and loader.load(b"[") == UNREADABLE_JSON


def test_search_path_is_the_schema_with_pg_catalog_first_and_no_public(db, schema):
    row = db.execute("SELECT current_schema() AS s, current_schemas(true) AS path").fetchone()
    assert row["s"] == schema
    assert row["path"][:2] == ["pg_catalog", schema] and "public" not in row["path"]


def test_timeouts_are_set_when_given(pg_dsn, schema):
    with connect(pg_dsn, schema, autocommit=True, statement_timeout=0.3, lock_timeout=2.5,
                 idle_in_transaction_session_timeout=60) as conn:
        settings = {name: conn.execute(f"SHOW {name}").fetchone()[name]
                    for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")}
        assert settings == {"statement_timeout": "300ms", "lock_timeout": "2500ms",
                            "idle_in_transaction_session_timeout": "1min"}
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute("SELECT pg_sleep(2)")
        assert conn.execute("SELECT 1 AS one").fetchone()["one"] == 1
    with connect(pg_dsn, schema, autocommit=True) as conn:  # None leaves the server's setting
        assert conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"] == "0"


@pytest.mark.parametrize("bad", [-1, "5", True, float("nan")])
def test_bad_timeout_is_a_config_error_before_connecting(schema, bad):
    with pytest.raises(ConfigError, match="statement_timeout"):
        connect("postgresql://nobody@127.0.0.1:1/none", schema, statement_timeout=bad)


def test_keepalives_always_on_unless_the_dsn_sets_them(pg_dsn, schema):
    with connect(pg_dsn, schema) as conn:
        params = conn.info.get_parameters()
        assert params["keepalives"] == "1" and params["keepalives_idle"] == "5"
        assert params["keepalives_interval"] == "2" and params["keepalives_count"] == "3"
        assert params["tcp_user_timeout"] == "10000"
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, keepalives_idle=30)
    with connect(dsn, schema) as conn:
        assert conn.info.get_parameters()["keepalives_idle"] == "30"
