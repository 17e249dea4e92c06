"""Opening connections: the only place runledger_beat connects to Postgres.

Every connection from ``connect()`` gets:

- ``search_path`` set to the runledger schema alone (then ``pg_temp``), for the caller's own
  SQL on the connection (the stores qualify every name themselves: see queries.for_schema).
  ``pg_catalog`` is then searched *first*, implicitly (PostgreSQL
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
- the never-raising loaders of ``loaders.py``.

``pool_mode`` "transaction" (a transaction-mode pooler such as PgBouncer between here and Postgres; the default
comes from the RUNLEDGER_POOL_MODE environment variable, else "session") turns off psycopg's server-side prepared
statements, which such a pooler cannot route, and leaves out every session-level SET (search_path, timeouts): it
would reach one server connection only and stay there for other clients.
"""

from __future__ import annotations

import os
import re
import weakref
from contextvars import ContextVar

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ..errors import ConfigError
from .loaders import register_safe_loaders
from .redaction import safe_error

DEFAULT_SCHEMA = "runledger"
#: The application_name of connections opened without one (the CLI sets its own; the audit log shows it).
APPLICATION_NAME: ContextVar[str] = ContextVar("runledger_application_name", default="runledger_beat")
#: The pool modes: "session" (a direct connection or a session pooler) and "transaction" (a transaction pooler).
POOL_MODES = ("session", "transaction")
#: The environment variable the CLI, the API and the worker hook read the pool mode from.
POOL_MODE_ENV = "RUNLEDGER_POOL_MODE"
_SCHEMAS: weakref.WeakKeyDictionary[psycopg.Connection, str] = weakref.WeakKeyDictionary()
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

#: Always on, unless the DSN sets them: notice a dead peer within seconds.
KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2, "keepalives_count": 3,
              "tcp_user_timeout": 10000}


def check_schema_name(schema: str) -> str:
    """Return the schema name, or raise ConfigError if it is not a plain identifier."""
    if not isinstance(schema, str) or not _SCHEMA_NAME.match(schema):
        raise ConfigError(f"runledger_schema: {schema!r} is not a plain SQL identifier")
    return schema



#: The DSN option naming the runledger schema (``options=-c runledger.schema=<name>``), for calls given no schema.
SCHEMA_OPTION = "runledger.schema"
_OPTION_SETTING = re.compile(r"(?:-c\s*|--)([A-Za-z0-9_.]+)=(\S*)")


def schema_of(dsn: str, schema: str | None = None) -> str:
    """The runledger schema for a DSN: ``schema`` when given, else the one the DSN's libpq ``options`` name with
    ``-c runledger.schema=<name>`` (so one string carries both, as the pytest plugin's ``runledger_dsn`` does),
    else "runledger"."""
    if schema is not None:
        return check_schema_name(schema)
    try:
        options = psycopg.conninfo.conninfo_to_dict(dsn).get("options") or ""
    except (psycopg.Error, UnicodeError, ValueError):
        return DEFAULT_SCHEMA  # connect() reports the unparsable DSN, its password masked
    named = [value for key, value in _OPTION_SETTING.findall(str(options)) if key == SCHEMA_OPTION]
    if not named:
        return DEFAULT_SCHEMA
    try:
        return check_schema_name(named[-1])
    except ConfigError:
        raise ConfigError(f"dsn: option {SCHEMA_OPTION}: {named[-1]!r} is not a plain SQL identifier") from None


def check_pool_mode(mode: str | None, name: str = "runledger_pool_mode") -> str:
    """The pool mode to use: ``mode``, else RUNLEDGER_POOL_MODE, else "session"; ConfigError naming ``name`` when
    it is not one of POOL_MODES."""
    if mode is None:
        mode, name = os.environ.get(POOL_MODE_ENV) or "session", POOL_MODE_ENV
    if mode not in POOL_MODES:
        raise ConfigError(f"{name}: expected one of {', '.join(POOL_MODES)}, got {mode!r}")
    return mode


def connection_schema(conn: psycopg.Connection) -> str | None:
    """The schema ``connect()`` opened ``conn`` for; None for a connection opened elsewhere."""
    return _SCHEMAS.get(conn)


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
            safe_timestamps: bool = True, pool_mode: str | None = None) -> psycopg.Connection:
    """Open a connection with dict rows, safe loaders, keepalives, timeouts and search_path set to ``schema``
    (in pool mode "transaction": no prepared statements, no session settings; see the module docstring).

    ``application_name`` defaults to the APPLICATION_NAME context variable ("runledger_beat").
    """
    check_schema_name(schema)
    pooled = check_pool_mode(pool_mode) == "transaction"
    timeouts = _timeouts(statement_timeout=statement_timeout, lock_timeout=lock_timeout,
                         idle_in_transaction_session_timeout=idle_in_transaction_session_timeout)
    conn = psycopg.connect(dsn, autocommit=True, row_factory=dict_row, connect_timeout=connect_timeout,
                           application_name=application_name or APPLICATION_NAME.get(), **_keepalives(dsn))
    try:
        register_safe_loaders(conn, timestamps=safe_timestamps)
        if pooled:
            conn.prepare_threshold = None
        else:
            set_search_path(conn, schema)
            for name, milliseconds in timeouts.items():
                conn.execute("SELECT set_config(%s, %s, false)", (name, milliseconds))
        _SCHEMAS[conn] = schema
        conn.autocommit = autocommit
    except BaseException:
        conn.close()
        raise
    return conn


def set_search_path(conn: psycopg.Connection, schema: str, local: bool = False) -> None:
    """Point unqualified names at the runledger schema (pg_catalog stays implicitly first; public is not searched)."""
    statement = "SET LOCAL search_path TO {}, pg_temp" if local else "SET search_path TO {}, pg_temp"
    conn.execute(sql.SQL(statement).format(sql.Identifier(check_schema_name(schema))))
