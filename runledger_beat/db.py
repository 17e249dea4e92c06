"""Connections, migrations and DSN handling: the only place that opens Postgres.

Every connection gets ``search_path`` set to the runledger schema, so the SQL in
sql/ stays unqualified. (Behind PgBouncer use session pooling: a transaction-mode
pooler would not keep the search_path, nor LISTEN.)
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from importlib import resources
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from . import queries

DEFAULT_SCHEMA = "runledger"
#: The application_name of connections opened without one (the CLI sets its own; the audit log shows it).
APPLICATION_NAME: ContextVar[str] = ContextVar("runledger_application_name", default="runledger_beat")
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


class ConfigError(Exception):
    """A setting is missing or wrong; the message names it and never holds a password."""


def check_schema_name(schema: str) -> str:
    """Return the schema name, or raise ConfigError if it is not a plain identifier."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigError(f"runledger_schema: {schema!r} is not a plain SQL identifier")
    return schema


def redact_dsn(dsn: str) -> str:
    """The DSN with any password replaced by ``***`` (URL or key=value form)."""
    if not dsn:
        return ""
    if "://" in dsn:
        parts = urlsplit(dsn)
        if parts.password is None:
            return dsn
        netloc = parts.netloc.rsplit("@", 1)
        user = parts.username or ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[-1]}"))
    return re.sub(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", r"\1***", dsn)


def safe_error(exc: BaseException, dsn: str | None = None) -> str:
    """One-line text of an error with the DSN's password scrubbed out."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if dsn:
        password = psycopg.conninfo.conninfo_to_dict(dsn).get("password") if _parsable(dsn) else None
        if password:
            text = text.replace(str(password), "***")
        text = text.replace(dsn, redact_dsn(dsn))
    return text


def _parsable(dsn: str) -> bool:
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
        return True
    except psycopg.Error:
        return False


def connect(dsn: str, schema: str = DEFAULT_SCHEMA, *, autocommit: bool = False,
            connect_timeout: int = 5, application_name: str | None = None) -> psycopg.Connection:
    """Open a connection with dict rows and search_path set to ``schema``.

    ``application_name`` defaults to the APPLICATION_NAME context variable ("runledger_beat").
    """
    check_schema_name(schema)
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=connect_timeout,
                           application_name=application_name or APPLICATION_NAME.get())
    set_search_path(conn, schema)
    conn.autocommit = autocommit
    return conn


def set_search_path(conn: psycopg.Connection, schema: str) -> None:
    """Point unqualified names at the runledger schema for this session."""
    conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(check_schema_name(schema))))


def migration_files() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in the package: (version, name, sql), in order."""
    found = []
    for entry in resources.files("runledger_beat").joinpath("sql/migrations").iterdir():
        match = re.match(r"^(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text("utf-8")))
    return sorted(found)


def migrate(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> list[str]:
    """Apply the migrations not yet applied, under an advisory lock; return their names.

    Safe to run from many processes at once; applying twice is a no-op.
    """
    check_schema_name(schema)
    applied_now: list[str] = []
    with conn.transaction():
        conn.execute(queries.migrate_lock, {"schema": schema})
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("SET LOCAL search_path TO {}, public").format(sql.Identifier(schema)))
        conn.execute(queries.create_migrations_table)
        done = {row["version"] if isinstance(row, dict) else row[0]
                for row in conn.execute(queries.applied_migrations).fetchall()}
        for version, name, text in migration_files():
            if version in done:
                continue
            conn.execute(text)
            conn.execute(queries.record_migration, {"version": version, "name": name})
            applied_now.append(name)
    return applied_now


def schema_ready(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> bool:
    """Whether the runledger tables exist in ``schema`` (checked when auto-migrate is off)."""
    row = conn.execute(queries.schema_ready, {"table": f'"{check_schema_name(schema)}".job_schedules'}).fetchone()
    if not conn.autocommit:
        conn.commit()
    return bool(row["ready"] if isinstance(row, dict) else row[0])
