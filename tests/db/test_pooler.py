"""The CLI, the API and doctor through a PgBouncer of the test's own in transaction mode (pool of four):
migrate works through it, the API's statements run on whatever server connection each transaction gets, and
doctor tells a transaction pooler apart from a direct connection and says which pool mode to set."""

from __future__ import annotations

import json

import pytest

from runledger_beat import api, cli
from runledger_beat.db import connect, migration_files

from ..support.pooler import PgBouncer


@pytest.fixture
def pooled(pg_dsn):
    """The session's DSN through a transaction-mode PgBouncer of the test's own."""
    pooler = PgBouncer(pg_dsn, pool_mode="transaction", pool_size=4)
    yield pooler.dsn_through(pg_dsn)
    pooler.close()


def _checks(out: str) -> dict[str, dict]:
    return {c["name"]: c for c in json.loads(out)["checks"]}


def test_migrate_and_the_api_through_a_transaction_pooler(capsys, monkeypatch, pg_dsn, pooled, bare_schema):
    monkeypatch.setenv("RUNLEDGER_POOL_MODE", "transaction")
    for _ in range(2):  # the second run finds every migration applied
        assert cli.main(["--dsn", pooled, "--schema", bare_schema, "migrate"]) == 0, capsys.readouterr()
    with connect(pg_dsn, bare_schema, autocommit=True, pool_mode="session") as direct:
        applied = {r["version"] for r in direct.execute("SELECT version FROM schema_migrations").fetchall()}
    assert applied == {version for version, _, _ in migration_files()}
    # Enough calls that psycopg would have prepared its statements (five runs): none is, and each transaction
    # may land on another server connection, whose search_path does not name the schema.
    with connect(pooled, bare_schema, autocommit=True) as conn:
        assert conn.prepare_threshold is None
        for i in range(8):
            api.create(conn, f"p{i}", "rl.record", every=60)
        api.pause(conn, "p3", note="through the pooler")
        listed = api.list_schedules(conn)
    for i in range(8):
        api.update(pooled, f"p{i}", every=30, schema=bare_schema)
    assert sorted(s["name"] for s in listed) == [f"p{i}" for i in range(8)]
    assert api.get(pooled, "p3", schema=bare_schema)["pause_note"] == "through the pooler"
    assert {s["every"] for s in api.list_schedules(pooled, schema=bare_schema)} == {30}


def test_doctor_detects_a_transaction_pooler_and_names_the_mode(capsys, monkeypatch, pg_dsn, pooled, schema):
    monkeypatch.delenv("RUNLEDGER_POOL_MODE", raising=False)
    cli.main(["--dsn", pooled, "--schema", schema, "doctor", "--json"])
    check = _checks(capsys.readouterr().out)["pool mode"]
    assert check["verdict"] == "FAIL" and 'runledger_pool_mode = "transaction"' in check["detail"], check
    assert "RUNLEDGER_POOL_MODE=transaction" in check["detail"]

    monkeypatch.setenv("RUNLEDGER_POOL_MODE", "transaction")
    cli.main(["--dsn", pooled, "--schema", schema, "doctor", "--json"])
    checks = _checks(capsys.readouterr().out)
    assert checks["pool mode"]["verdict"] == "ok" and "transaction-mode pooler" in checks["pool mode"]["detail"]
    assert checks["migrations"]["verdict"] == "ok"  # the other checks run through the pooler too

    cli.main(["--dsn", pg_dsn, "--schema", schema, "doctor", "--json"])
    check = _checks(capsys.readouterr().out)["pool mode"]
    assert check["verdict"] == "warn" and "no transaction pooler" in check["detail"], check

    monkeypatch.delenv("RUNLEDGER_POOL_MODE")
    cli.main(["--dsn", pg_dsn, "--schema", schema, "doctor", "--json"])
    check = _checks(capsys.readouterr().out)["pool mode"]
    assert check["verdict"] == "ok" and "pool mode session" in check["detail"], check


def test_beat_listens_over_listen_dsn_or_polls_in_pool_mode_transaction(pg_dsn, pooled, schema):
    from runledger_beat.beat.listener import ChangeListener
    from runledger_beat.settings import load

    conf = {"runledger_dsn": pooled, "runledger_schema": schema, "runledger_pool_mode": "transaction"}
    polling = load(conf)
    assert polling.pooled and not polling.listens
    listener = ChangeListener(polling)
    listener.open()
    assert not listener.enabled and not listener.listening and listener.wait(0.01) is False

    direct = load(dict(conf, runledger_listen_dsn=pg_dsn))
    assert direct.listens
    listener = ChangeListener(direct)
    try:
        listener.open()
        assert listener.listening
        with connect(pooled, schema, autocommit=True, pool_mode="transaction") as conn:
            api.create(conn, "wake", "rl.record", every=60)  # through the pooler; NOTIFY reaches the direct LISTEN
        assert listener.wait(5.0) is True
    finally:
        listener.close()
    with pytest.raises(Exception, match="runledger_pool_mode"):
        load(dict(conf, runledger_pool_mode="statement"))
