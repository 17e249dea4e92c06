"""Login roles holding exactly what `runledger-beat grants KIND ROLE` prints, for tests that act as beat, a worker,
the CLI, the dashboard or an attacker.

The schema is migrated by its owner (the test DSN's superuser); the roles made here have no CREATE anywhere.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import psycopg
from psycopg import sql

from runledger_beat.db.grants import KINDS, statements

from .procs import EXECUTIONS_DDL

#: Only for the test tasks (tests/celeryapp.py records each execution in this table).
TEST_TASK_GRANTS = [sql.SQL("GRANT SELECT, INSERT, UPDATE ON {schema}.executions TO {role}"),
                    sql.SQL("GRANT USAGE ON SEQUENCE {schema}.executions_n_seq TO {role}")]


def role_dsn(pg_dsn: str, role: str) -> str:
    """The test DSN with another user (trust auth lets any role log in)."""
    return psycopg.conninfo.make_conninfo(pg_dsn, user=role)


def grant(admin: psycopg.Connection, kind: str, schema: str, role: str) -> None:
    """Run what `runledger-beat grants KIND ROLE --schema SCHEMA` prints."""
    for statement in statements(kind, role, schema):
        admin.execute(statement)


@contextlib.contextmanager
def limited_roles(pg_dsn: str, schema: str, kinds: tuple[str, ...] = tuple(KINDS)) -> Iterator[dict[str, str]]:
    """One login role per kind with only that kind's grants (the worker may also record test executions);
    {kind: role name}. Dropped afterwards, their sessions ended first."""
    suffix = uuid.uuid4().hex[:8]
    names = {kind: f"rl_{kind.replace('-', '_')}_{suffix}" for kind in kinds}
    admin = psycopg.connect(pg_dsn, autocommit=True)
    try:
        admin.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        admin.execute(EXECUTIONS_DDL)
        for kind, role in names.items():
            admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            grant(admin, kind, schema, role)
        if "worker" in names:
            for statement in TEST_TASK_GRANTS:
                admin.execute(statement.format(schema=sql.Identifier(schema), role=sql.Identifier(names["worker"])))
        yield names
    finally:
        for role in names.values():
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            with contextlib.suppress(psycopg.errors.UndefinedObject):
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
        admin.close()
