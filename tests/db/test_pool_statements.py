"""Every statement the stores run names its tables and functions with the schema, so it runs the same on any
backend a transaction-mode pooler hands out, whatever that backend's search_path (queries.for_schema)."""

from __future__ import annotations

import re

import psycopg
import pytest

from runledger_beat.db import queries
from runledger_beat.db.connect import POOL_MODE_ENV, check_pool_mode, connect, connection_schema
from runledger_beat.db.schedule_store import ScheduleStore
from runledger_beat.errors import ConfigError

_PARAM = re.compile(r"%\((\w+)\)[sb]")
_PREPARABLE = re.compile(r"^\s*(WITH|SELECT|INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
#: Statements for other schemas or the migration runner (they take the schema as a parameter or set it locally).
_NOT_STORE = {"create_migrations_table", "applied_migrations", "record_migration"}


def _not_runledger(name: str) -> bool:
    """The migration bookkeeping (its own schema handling) and import-from's reads of django-celery-beat's tables
    (a source database of the user's, not a runledger schema)."""
    return name in _NOT_STORE or name.startswith("dcb_")


def _positional(statement: str) -> str:
    """The statement with %(name)s parameters as $n (one number per name), for PREPARE."""
    numbers: dict[str, int] = {}
    return _PARAM.sub(lambda m: f"${numbers.setdefault(m[1], len(numbers) + 1)}", statement.replace("%%", "%"))


def _names() -> list[str]:
    return sorted(n for n, text in queries._QUERIES.items() if _PREPARABLE.match(text) and not _not_runledger(n))


def test_every_store_statement_resolves_without_a_search_path(pg_dsn: str, schema: str) -> None:
    qualified = queries.for_schema(schema)
    failures, unqualified_fail = [], 0
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("SET search_path TO pg_catalog")  # nothing of the runledger schema is found unqualified
        for name in _names():
            for text, bucket in ((getattr(qualified, name), "qualified"), (getattr(queries, name), "plain")):
                try:
                    conn.execute(f"PREPARE probe AS {_positional(text)}")
                    conn.execute("DEALLOCATE probe")
                except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction) as exc:
                    if bucket == "qualified":
                        failures.append(f"{name}: {exc}")
                    else:
                        unqualified_fail += 1
                except psycopg.errors.AmbiguousParameter:
                    pass  # an untyped parameter: its names were resolved before this error
    assert not failures, "\n".join(failures)
    assert len(_names()) > 40 and unqualified_fail > 40  # the probe does tell the two apart


def test_qualify_names_tables_functions_and_the_schema() -> None:
    text = queries.qualify("SELECT runledger_instant_ok(x), 'jobs'::regclass, current_schema() FROM jobs j "
                           "JOIN job_schedules s ON s.id = j.schedule_id WHERE jobs.id = 1", "s1")
    assert text == ("SELECT \"s1\".runledger_instant_ok(x), '\"s1\".jobs'::regclass, 's1' FROM \"s1\".jobs j "
                    "JOIN \"s1\".job_schedules s ON s.id = j.schedule_id WHERE jobs.id = 1")
    with pytest.raises(ConfigError, match="runledger_schema"):
        queries.qualify("SELECT 1", 'x"; DROP')


def test_pool_mode_transaction_leaves_no_session_state(pg_dsn: str, schema: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with connect(pg_dsn, schema, autocommit=True, statement_timeout=7, pool_mode="transaction") as conn:
        assert conn.prepare_threshold is None and connection_schema(conn) == schema
        assert conn.execute("SHOW statement_timeout").fetchone()["statement_timeout"] != "7s"
        assert schema not in conn.execute("SHOW search_path").fetchone()["search_path"]
        ScheduleStore(conn).conn.execute("SELECT 1")
        assert ScheduleStore(conn).q.schema == schema
    monkeypatch.setenv(POOL_MODE_ENV, "transaction")
    assert check_pool_mode(None) == "transaction"
    monkeypatch.setenv(POOL_MODE_ENV, "statement")
    with pytest.raises(ConfigError, match=POOL_MODE_ENV):
        check_pool_mode(None)
    with pytest.raises(ConfigError, match="runledger_pool_mode"):
        check_pool_mode("sessions")


def test_a_claims_transaction_sets_its_own_timeouts_in_pool_mode_transaction(pg_dsn: str, schema: str) -> None:
    from runledger_beat.db.beat_store import BeatStore

    with connect(pg_dsn, schema, pool_mode="transaction") as conn:
        store = BeatStore(conn)
        store.set_local_timeouts(30, 5, 7)
        shown = [conn.execute(f"SHOW {name}").fetchone()[name]
                 for name in ("statement_timeout", "lock_timeout", "idle_in_transaction_session_timeout")]
        assert shown == ["30s", "5s", "7s"]
        conn.commit()  # local to the transaction: nothing stays on the server connection for its next client
        assert conn.execute("SHOW lock_timeout").fetchone()["lock_timeout"] != "5s"
        conn.rollback()
