"""Shared fixtures: a fresh runledger schema per test on a real Postgres, real brokers.

The tiers are folders: tests/unit (no services), tests/db (PostgreSQL), tests/e2e (real beats, workers and
brokers), tests/browser (a real browser). Each test under a tier folder gets that tier's marker, so
``-m "not e2e"`` works as well as a path.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from runledger_beat.db import connect, drop_schema, migrate

from .support.dashboard import chromium, seeded  # noqa: F401 -- fixtures of the dashboard's tests
from .support.private import PostgresCluster, RabbitNode
from .support.services import find_amqp, find_postgres, find_redis, own_database
from .support.webproc import start_web

_RUN_DIR = "RUNLEDGER_TEST_RUN_DIR"
_made_run_dir: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C reaches the processes the tests start; a folder the run's test processes share (its parallel
    workers inherit the variable), outside pytest's own temporary folders: a pytest started meanwhile resets those
    to mode 0700, which an embedded Postgres run as another user then cannot traverse."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background by a shell without job control: SIGINT arrives ignored and every process the
        # tests start would ignore the Ctrl-C they send it. With a handler here, those processes start with the
        # default again.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = getattr(config, "workerinput", {}).get("workercount", 0)
    if workers > 1:
        config.pluginmanager.register(_SpreadSlow(workers), "runledger-spread-slow")
    if not hasattr(config, "workerinput") and _RUN_DIR not in os.environ:
        os.environ[_RUN_DIR] = tempfile.mkdtemp(prefix="runledger-run-")
        _made_run_dir.append(os.environ[_RUN_DIR])


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _made_run_dir:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_dsn():
    """A database of the session's own on the real server (see own_database)."""
    with own_database(find_postgres()) as dsn:
        yield dsn


@contextmanager
def migrated_schema(pg_dsn: str) -> Iterator[str]:
    """A new migrated schema, dropped on leaving. Its DDL commits without waiting for the disk
    (``synchronous_commit = off``: what a crash of the test server could lose, nobody needs)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with connect(pg_dsn, "public", autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        conn.autocommit = False
        migrate(conn, name)
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            drop_schema(conn, name)


@pytest.fixture
def schema(pg_dsn: str):
    """A migrated schema of its own for each test, dropped afterwards."""
    with migrated_schema(pg_dsn) as name:
        yield name


@pytest.fixture(scope="module")
def module_schema(pg_dsn: str):
    """One migrated schema for a module's tests that leave it as they found it (each asserts it did): a migration
    per test would cost more than the tests."""
    with migrated_schema(pg_dsn) as name:
        yield name


@pytest.fixture
def bare_schema(pg_dsn: str):
    """The name of a schema nothing created yet (the test migrates it, or not); dropped afterwards."""
    name = f"t_bare_{uuid.uuid4().hex[:12]}"
    yield name
    with connect(pg_dsn, "public", autocommit=True) as conn:
        drop_schema(conn, name)


@pytest.fixture
def db(pg_dsn: str, schema: str):
    """An autocommit connection whose search_path is the test schema."""
    conn = connect(pg_dsn, schema, autocommit=True)
    yield conn
    conn.close()


@pytest.fixture(scope="session")
def amqp_url() -> str:
    return find_amqp()


@pytest.fixture(scope="session")
def redis_url() -> str:
    return find_redis()


@pytest.fixture
def web(pg_dsn, schema):
    """Start `runledger-beat web` on a free port; yields a function (token=None, env=None, args=(), dsn=None) -> base
    URL. The processes are stopped afterwards; ``web.procs`` lists them (their logs)."""
    started: list = []

    def start(token: str | None = None, env: dict | None = None, args: tuple = (), dsn: str | None = None) -> str:
        return start_web(pg_dsn, schema, started, token, env, args, dsn)

    start.procs = started
    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def private_rabbit():
    """A RabbitMQ node of this test's own (tests/support/private.py): it may stop or restart it."""
    node = RabbitNode()
    yield node
    node.close()


@pytest.fixture
def private_postgres():
    """A PostgreSQL cluster of this test's own (tests/support/private.py): it may restart or stop it."""
    cluster = PostgresCluster()
    yield cluster
    cluster.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark each test with its tier (its folder under tests/)."""
    for item in items:
        tier = next((p.name for p in item.path.parents if p.name in TIERS), None)
        if tier is not None:
            item.add_marker(tier)


#: The tier folders whose tests get a marker of the folder's name (subfolders included).
TIERS = ("db", "e2e", "browser")


class _SpreadSlow:
    """Orders each test process's collection with spread_slow, after -m has deselected."""

    def __init__(self, workers: int) -> None:
        self.workers = workers

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = spread_slow(items, self.workers)


#: Short tests each process runs before its first long scenario, times the process's number (see spread_slow).
STAGGER = 4


def spread_slow(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The long scenarios (marker ``slow``, mostly waiting out outages and windows) dealt to each process's share,
    longest first (``slow(seconds=N)``, else 20), and spaced evenly within it: each starts one early (process k
    after k * STAGGER short tests) and the others as its share goes, so their waits overlap the short tests' work
    instead of forming a tail at the end.

    pytest-xdist's work stealing hands process k the k-th of ``workers`` contiguous shares at start (then idle
    processes take half of the longest queue); every process collects, and orders, the same way.
    """
    slow = sorted((i for i in items if i.get_closest_marker("slow")),
                  key=lambda i: -i.get_closest_marker("slow").kwargs.get("seconds", 20))
    rest = iter([i for i in items if not i.get_closest_marker("slow")])
    ordered, left = [], len(items)
    for k in range(workers):
        size = left // (workers - k)
        left -= size
        dealt = slow[k::workers]
        if len(dealt) > size:
            return items  # too few tests to share out: as collected
        # Process k starts its first scenario after k * STAGGER short tests: the scenarios' starts (private brokers
        # booting, beats and workers importing Celery) would otherwise all load the machine in the same seconds.
        first = min(k * STAGGER, size - 1 - (len(dealt) - 1) * size // len(dealt)) if dealt else 0
        at = {first + j * size // len(dealt): item for j, item in enumerate(dealt)} if dealt else {}
        ordered += [at[index] if index in at else next(rest) for index in range(size)]
    return ordered
