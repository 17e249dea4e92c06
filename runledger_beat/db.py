"""Connections, migrations and DSN handling: the only place that opens Postgres.

Every connection from ``connect()`` gets:

- ``search_path`` set to the runledger schema alone (then ``pg_temp``), so the SQL in
  sql/ stays unqualified. ``pg_catalog`` is then searched *first*, implicitly (PostgreSQL
  does so whenever it is not named in the path), so no object in the runledger schema
  or in ``public`` can shadow a built-in; ``public`` is not searched at all. Naming
  ``pg_catalog`` explicitly first would do the same lookups but turn
  ``current_schema()`` (the NOTIFY payload and the prepare lock) into ``pg_catalog``
  and send unqualified CREATEs into the system catalog, so it is left implicit.
- TCP keepalives (idle 5 s, then every 2 s, 3 probes) and ``tcp_user_timeout`` 10 s,
  unless the DSN sets them, so a cut-off beat notices within seconds and the server
  drops its session (and its row locks) as fast.
- optional ``statement_timeout``, ``lock_timeout`` and
  ``idle_in_transaction_session_timeout`` (seconds; set with ``set_config`` after
  connecting, which works behind PgBouncer too, unlike startup ``options``).
- loaders that never raise on one bad value: timestamps outside Python's range
  (``infinity``, ``-infinity``, year 0 or 10000+) load as ``OUT_OF_RANGE_LOW`` /
  ``OUT_OF_RANGE_HIGH`` (``datetime.min`` / ``datetime.max``, aware in UTC for
  timestamptz), and JSON that Python cannot load (nested deeper than the recursion
  limit) loads as ``UNREADABLE_JSON``; so one bad row never breaks a fetch of many.
  Check with ``is_out_of_range(dt)`` / ``is_unreadable(value)`` before using a value.

(Behind PgBouncer use session pooling: a transaction-mode pooler would not keep the
search_path, nor LISTEN.)

``redact_dsn`` and ``safe_error`` live in ``runledger_beat.redaction`` and are
re-exported here.
"""

from __future__ import annotations

import re
import time
from contextvars import ContextVar
from datetime import datetime, timezone
from importlib import resources
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.datetime import (
    TimestampBinaryLoader,
    TimestampLoader,
    TimestamptzBinaryLoader,
    TimestamptzLoader,
)
from psycopg.types.json import JsonbBinaryLoader, JsonBinaryLoader, JsonbLoader, JsonLoader

from . import queries
from .backoff import Backoff
from .redaction import dsn_has_password, read_dsn_file, redact_dsn, safe_error

__all__ = ["DEFAULT_SCHEMA", "OUT_OF_RANGE_HIGH", "OUT_OF_RANGE_LOW", "OUT_OF_RANGE_REASON", "UNREADABLE_JSON",
           "ConfigError",
           "check_dsn", "check_schema_name", "check_version", "connect", "dsn_has_password", "is_out_of_range",
           "is_unreadable", "migrate", "migration_files", "read_dsn_file", "redact_dsn", "register_safe_loaders",
           "require_schema", "safe_error", "schema_ready", "set_search_path"]

DEFAULT_SCHEMA = "runledger"
#: The application_name of connections opened without one (the CLI sets its own; the audit log shows it).
APPLICATION_NAME: ContextVar[str] = ContextVar("runledger_application_name", default="runledger_beat")
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: Always on, unless the DSN sets them: notice a dead peer within seconds.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
              "tcp_user_timeout": 10000}
#: Sentinels a timestamptz beyond Python's range loads as (timestamp: the same, naive).
OUT_OF_RANGE_HIGH = datetime.max.replace(tzinfo=timezone.utc)
OUT_OF_RANGE_LOW = datetime.min.replace(tzinfo=timezone.utc)
#: What validation says of such a value, after the field name ("end_at: not a finite date-time ...").
OUT_OF_RANGE_REASON = "not a finite date-time within year 1..9999"


class ConfigError(Exception):
    """A setting is missing or wrong; the message names it and never holds a password."""


def check_schema_name(schema: str) -> str:
    """Return the schema name, or raise ConfigError if it is not a plain identifier."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigError(f"runledger_schema: {schema!r} is not a plain SQL identifier")
    return schema


def check_dsn(dsn: str) -> str:
    """Return the DSN, or raise ConfigError (the password masked) when psycopg cannot parse it: a ``%`` not
    followed by two hex digits in a URL, an unterminated quote in key=value form. Checked before anything runs,
    so the error is never a traceback that quotes the password."""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except (psycopg.Error, UnicodeError, ValueError) as exc:
        raise ConfigError(f"dsn: cannot be parsed: {safe_error(exc, dsn)} (in a URL, percent-encode the password's "
                          "special characters: % is %25, @ is %40; in key=value form, quote it as 'p w')") from None
    return dsn


# ---------------------------------------------------------------------------
# Loaders that never raise on one bad value


class UnreadableJson:
    """Stands for a json/jsonb value Python could not load; its repr says why."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __repr__(self) -> str:
        return f"<unreadable JSON: {self.reason}>"

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UnreadableJson)

    def __hash__(self) -> int:
        return hash(UnreadableJson)


#: What a json/jsonb value nested deeper than Python's recursion limit loads as. Invalid JSON text (only
#: possible for ``json``) loads as another UnreadableJson naming the error; all compare equal to this one.
UNREADABLE_JSON = UnreadableJson("nested deeper than Python's recursion limit")


def is_unreadable(value: Any) -> bool:
    """Whether a loaded json/jsonb value is the unreadable sentinel."""
    return isinstance(value, UnreadableJson)


def is_out_of_range(value: Any) -> bool:
    """Whether a loaded timestamp is a sentinel for a value beyond year 1..9999 (or ±infinity).

    ``datetime.max`` itself (9999-12-31T23:59:59.999999) cannot be told apart and counts as out of range.
    """
    if not isinstance(value, datetime):
        return False
    naive = value.replace(tzinfo=None)
    return naive == datetime.max or naive == datetime.min


def _sentinel(data: Any, aware: bool, binary: bool = False) -> datetime:
    """The sentinel for an unloadable timestamp: low for -infinity and BC dates, else high."""
    raw = bytes(data)
    # binary: int64 microseconds since 2000-01-01, negative is before; text: "-infinity" or "... BC"
    low = int.from_bytes(raw[:8], "big", signed=True) < 0 if binary else raw.startswith(b"-") or b"BC" in raw
    value = datetime.min if low else datetime.max
    return value.replace(tzinfo=timezone.utc) if aware else value


class SafeTimestamptzLoader(TimestamptzLoader):
    """timestamptz (text): out-of-range values load as OUT_OF_RANGE_HIGH/LOW instead of raising DataError."""

    def load(self, data: Any) -> datetime:
        """Load, or return the sentinel."""
        try:
            return super().load(data)
        except (psycopg.DataError, OverflowError, ValueError):
            return _sentinel(data, True)


class SafeTimestamptzBinaryLoader(TimestamptzBinaryLoader):
    """timestamptz (binary): as SafeTimestamptzLoader."""

    def load(self, data: Any) -> datetime:
        """Load, or return the sentinel."""
        try:
            return super().load(data)
        except (psycopg.DataError, OverflowError, ValueError):
            return _sentinel(data, True, binary=True)


class SafeTimestampLoader(TimestampLoader):
    """timestamp (text): out-of-range values load as naive datetime.max/min."""

    def load(self, data: Any) -> datetime:
        """Load, or return the sentinel."""
        try:
            return super().load(data)
        except (psycopg.DataError, OverflowError, ValueError):
            return _sentinel(data, False)


class SafeTimestampBinaryLoader(TimestampBinaryLoader):
    """timestamp (binary): as SafeTimestampLoader."""

    def load(self, data: Any) -> datetime:
        """Load, or return the sentinel."""
        try:
            return super().load(data)
        except (psycopg.DataError, OverflowError, ValueError):
            return _sentinel(data, False, binary=True)


def _safe_json(base: type) -> type:
    """A json loader class that returns an UnreadableJson instead of raising RecursionError/ValueError."""

    def load(self: Any, data: Any) -> Any:
        try:
            return base.load(self, data)
        except RecursionError:
            return UNREADABLE_JSON
        except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
            return UnreadableJson(f"not valid JSON ({type(exc).__name__})")

    load.__doc__ = "Load, or return an UnreadableJson sentinel."
    return type(f"Safe{base.__name__}", (base,), {"load": load, "__doc__": f"{base.__name__} that never raises."})


_SAFE_LOADERS: tuple[tuple[str, type], ...] = (
    ("timestamptz", SafeTimestamptzLoader), ("timestamptz", SafeTimestamptzBinaryLoader),
    ("timestamp", SafeTimestampLoader), ("timestamp", SafeTimestampBinaryLoader),
    ("json", _safe_json(JsonLoader)), ("json", _safe_json(JsonBinaryLoader)),
    ("jsonb", _safe_json(JsonbLoader)), ("jsonb", _safe_json(JsonbBinaryLoader)),
)


def register_safe_loaders(conn: psycopg.Connection, timestamps: bool = True) -> None:
    """Register the never-raising json and (with ``timestamps``) timestamp loaders on one connection (connect()
    does this). The timestamp loaders parse in Python, several times slower than psycopg's C ones: beat's claims
    connection goes without them, its claim statement nulling out-of-range instants in SQL instead."""
    for type_name, loader in _SAFE_LOADERS:
        if timestamps or not type_name.startswith("timestamp"):
            conn.adapters.register_loader(type_name, loader)


# ---------------------------------------------------------------------------
# Connections


def _keepalives(dsn: str) -> dict[str, int]:
    """The keepalive parameters the DSN does not set itself (tcp_user_timeout needs libpq 12)."""
    try:
        given = psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        given = {}
    wanted = dict(KEEPALIVES)
    if psycopg.pq.version() < 120000:
        wanted.pop("tcp_user_timeout")
    return {k: v for k, v in wanted.items() if k not in given}


def _milliseconds(name: str, seconds: float) -> str:
    """A timeout in seconds as the millisecond text Postgres takes; ConfigError if negative or not a number."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 2**31 / 1000:
        raise ConfigError(f"{name}: expected a number of seconds >= 0, got {seconds!r}")
    return str(int(round(seconds * 1000)))


def _timeouts(**seconds: float | None) -> dict[str, str]:
    """The timeouts given, as setting name -> milliseconds (None leaves the server's setting)."""
    return {name: _milliseconds(name, value) for name, value in seconds.items() if value is not None}


def connect(dsn: str, schema: str = DEFAULT_SCHEMA, *, autocommit: bool = False,
            connect_timeout: int = 5, application_name: str | None = None,
            statement_timeout: float | None = None, lock_timeout: float | None = None,
            idle_in_transaction_session_timeout: float | None = None,
            safe_timestamps: bool = True) -> psycopg.Connection:
    """Open a connection with dict rows, safe loaders, keepalives, timeouts and search_path set to ``schema``.

    ``application_name`` defaults to the APPLICATION_NAME context variable ("runledger_beat").
    """
    check_schema_name(schema)
    timeouts = _timeouts(statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                         idle_in_transaction_session_timeout=idle_in_transaction_session_timeout)
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=connect_timeout,
                           application_name=application_name or APPLICATION_NAME.get(), **_keepalives(dsn))
    try:
        register_safe_loaders(conn, timestamps=safe_timestamps)
        set_search_path(conn, schema)
        for name, milliseconds in timeouts.items():
            conn.execute("SELECT set_config(%s, %s, false)", (name, milliseconds))
        conn.autocommit = autocommit
    except BaseException:
        conn.close()
        raise
    return conn


def set_search_path(conn: psycopg.Connection, schema: str, local: bool = False) -> None:
    """Point unqualified names at the runledger schema (pg_catalog stays implicitly first; public is not searched)."""
    statement = "SET LOCAL search_path TO {}, pg_temp" if local else "SET search_path TO {}, pg_temp"
    conn.execute(sql.SQL(statement).format(sql.Identifier(check_schema_name(schema))))


# ---------------------------------------------------------------------------
# Migrations


def migration_files() -> list[tuple[int, str, str]]:
    """The numbered migrations shipped in the package: (version, name, sql), in order."""
    found = []
    for entry in resources.files("runledger_beat").joinpath("sql/migrations").iterdir():
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
    ``schema_migrations`` (the README's grants for the command line) is not asked for the version.
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
