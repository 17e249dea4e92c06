"""The migration runner: numbered SQL files in sql/migrations/, applied in order under an advisory lock."""

from __future__ import annotations

import re
import time
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql

from ..backoff import Backoff
from ..errors import ConfigError
from . import queries
from .connect import DEFAULT_SCHEMA, check_schema_name, set_search_path


def migration_files() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in the package: (version, name, sql), in order."""
    found = []
    for entry in resources.files("runledger_beat.db").joinpath("sql/migrations").iterdir():
        match = re.match(r"^(\d+)_(\w+)\.sql$", entry.name)
        if match:
            found.append((int(match.group(1)), entry.name, entry.read_text("utf-8")))
    return sorted(found)


def _value(row: Any, key: str) -> Any:
    """A column of a dict or tuple row."""
    return row[key] if isinstance(row, dict) else row[0]


def _applied_versions(conn: psycopg.Connection, schema: str) -> set[int] | None:
    """Versions recorded in the schema, or None when it has no migrations table. Plain reads: no DDL, no locks.

    Runs inside a transaction the caller opened (its search_path is changed for that transaction only).
    """
    row = conn.execute(queries.schema_ready, {"table": f'"{schema}".schema_migrations'}).fetchone()
    if not _value(row, "ready"):
        return None
    set_search_path(conn, schema, local=True)
    versions = {_value(r, "version") for r in conn.execute(queries.applied_migrations).fetchall()}
    if not all(isinstance(v, int) for v in versions):  # another tool's table of the same name (text versions)
        raise ConfigError(f"runledger_schema: the schema_migrations table of schema {schema!r} is not "
                          "runledger_beat's; choose another runledger_schema")
    return versions


def _refuse_newer(applied: set[int] | None) -> None:
    """ConfigError when the database holds a migration newer than this code ships."""
    known = max((version for version, _, _ in migration_files()), default=0)
    newest = max(applied or {0})
    if newest > known:
        raise ConfigError(f"runledger_schema: database is at migration {newest} but this runledger_beat knows up to "
                          f"{known}; upgrade runledger_beat")


def check_version(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> int | None:
    """The schema's migration version (None: not migrated); ConfigError if newer than this code knows."""
    check_schema_name(schema)
    with conn.transaction():
        applied = _applied_versions(conn, schema)
    _refuse_newer(applied)
    return max(applied) if applied else None


#: The command that creates or upgrades the tables (error messages point to it).
MIGRATE_COMMAND = "runledger-beat migrate"
#: A line splitting a migration into steps, each committed on its own (a long scan without a long lock).
STEP_MARKER = "\n-- runledger:commit\n"
#: How long a migration step waits for a table lock before it lets go and tries again. While a DDL
#: statement waits for its lock, every insert into that table queues behind it: without this bound one
#: long transaction reading jobs would hold back every beat and worker for as long as it runs.
MIGRATION_LOCK_TIMEOUT = 0.2
#: How long a migration keeps trying to take its locks before it gives up (ConfigError).
MIGRATION_GIVE_UP_AFTER = 300.0


def migrate(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA, until: int | None = None, *,
            lock_timeout: float = MIGRATION_LOCK_TIMEOUT,
            give_up_after: float = MIGRATION_GIVE_UP_AFTER) -> list[str]:
    """Apply the migrations not yet applied, under an advisory lock; return their names.

    Each migration is one transaction, or several where its file is split by STEP_MARKER lines
    (each step may run again: it is recorded after the last). ``until`` stops after that version
    (tests and benchmarks build an older schema with it). A step waits ``lock_timeout`` seconds at
    most for a table lock, then rolls back and tries again with back-off (from then on once no beat
    holds an instant prepared), so writers never queue long behind it; after ``give_up_after``
    seconds of that it raises ConfigError.

    Safe to run from many processes at once; applying twice is a no-op. When every
    shipped migration is already applied it only reads (no DDL, no lock), so a role
    without CREATE can run beat with runledger_auto_migrate on. A database newer
    than this code raises ConfigError.
    """
    check_schema_name(schema)
    shipped = [m for m in migration_files() if until is None or m[0] <= until]
    with conn.transaction():
        applied = _applied_versions(conn, schema)
    _refuse_newer(applied)
    if applied is not None and all(version in applied for version, _, _ in shipped):
        return []
    applied_now: list[str] = []
    for version, name, text in shipped:
        steps = text.split(STEP_MARKER)
        for number, step in enumerate(steps, 1):
            where = f"migration {name}" + (f" (step {number} of {len(steps)})" if len(steps) > 1 else "")
            retry = Backoff(f"the table locks of {where}", first=0.05, cap=1.0)
            deadline = time.monotonic() + give_up_after
            while True:
                try:
                    outcome = _apply_step(conn, schema, version, name, step, number == len(steps), lock_timeout,
                                          hold_preparing=retry.failing)
                    break
                except psycopg.errors.LockNotAvailable as exc:
                    if time.monotonic() >= deadline:
                        raise ConfigError(
                            f"runledger_schema: {where} could not take its table locks within {give_up_after:g} s: "
                            "a long transaction holds them (see pg_stat_activity); run `runledger-beat migrate` "
                            "again once it ends") from exc
                    time.sleep(retry.failed("another transaction holds them"))
            retry.succeeded()
            if outcome == "done before":
                break
            if outcome == "recorded":
                applied_now.append(name)
    return applied_now


def _apply_step(conn: psycopg.Connection, schema: str, version: int, name: str, step: str, last: bool,
                lock_timeout: float, hold_preparing: bool) -> str:
    """Run one step of a migration in its own transaction: 'done before', 'recorded' (the last step) or 'ran'.

    ``hold_preparing`` (a retry) first waits until no beat holds an instant prepared and keeps them from
    preparing one: a step that conflicts with beats' open transactions then gets its locks.
    """
    with conn.transaction():
        conn.execute(queries.migrate_lock, {"schema": schema})  # other migrators are waited for, unbounded
        if hold_preparing:
            conn.execute(queries.migrate_hold_preparing, {"schema": schema})
        conn.execute(queries.bound_lock_waits, {"ms": f"{round(lock_timeout * 1000)}ms"})
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        set_search_path(conn, schema, local=True)
        conn.execute(queries.create_migrations_table)
        done = {_value(row, "version") for row in conn.execute(queries.applied_migrations).fetchall()}
        _refuse_newer(done)
        if version in done:
            return "done before"
        conn.execute(step)
        if not last:
            return "ran"
        conn.execute(queries.record_migration, {"version": version, "name": name})
        return "recorded"


def require_schema(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA, *, up_to_date: bool = True) -> None:
    """ConfigError in one line unless ``schema`` holds the runledger tables (with ``up_to_date``: every shipped
    migration applied); a database newer than this code is refused too.

    What every ``runledger-beat`` command that reads the tables checks first. A role that may not read
    ``schema_migrations`` (the command line's grants) is not asked for the version.
    """
    check_schema_name(schema)
    run = f"run `{MIGRATE_COMMAND}`"
    if not _value(conn.execute(queries.runledger_tables, {"schema": schema}).fetchone(), "present"):
        raise ConfigError(f'schema "{schema}" has no runledger tables ({run})')
    try:
        at = check_version(conn, schema)
    except psycopg.errors.InsufficientPrivilege:
        return
    shipped = max(version for version, _, _ in migration_files())
    if up_to_date and (at is None or at < shipped):
        raise ConfigError(f'schema "{schema}" is at migration {at or 0} of {shipped} ({run})')


def drop_schema(conn: psycopg.Connection, schema: str) -> None:
    """Drop a runledger schema and everything in it (the users' pytest plugin cleans up with it)."""
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(check_schema_name(schema))))


def schema_ready(conn: psycopg.Connection, schema: str = DEFAULT_SCHEMA) -> bool:
    """Whether the runledger tables exist in ``schema`` (checked when auto-migrate is off).

    Raises ConfigError when the database is at a migration newer than this code knows.
    """
    check_version(conn, schema)
    row = conn.execute(queries.schema_ready, {"table": f'"{check_schema_name(schema)}".job_schedules'}).fetchone()
    if not conn.autocommit:
        conn.commit()
    return bool(_value(row, "ready"))
