"""Shared fixtures: a fresh runledger schema per test on a real Postgres, real brokers."""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg import sql

from runledger_beat.db import connect, drop_schema, migrate

from .services import find_amqp, find_postgres, find_redis
from .webproc import start_web


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return find_postgres()


@pytest.fixture
def schema(pg_dsn: str):
    """A migrated schema of its own for each test, dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with connect(pg_dsn, "public", autocommit=False) as conn:
        migrate(conn, name)
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


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
