"""`runledger-beat grants KIND ROLE`: the GRANT statements a role of that kind needs, and nothing more.

One source for the README, SECURITY.md, the tests and users: the ``grants_<kind>`` templates of
``db/sql/grants.sql``, with the schema and role filled in as quoted identifiers by psycopg.sql (no text of the
caller's is ever formatted into SQL). Run the output as the schema's owner, after `runledger-beat migrate`.
"""

from __future__ import annotations

from psycopg import sql

from ..errors import ScheduleError
from . import queries
from .connect import DEFAULT_SCHEMA, check_schema_name

#: The kinds of role, and what each one does.
KINDS: dict[str, str] = {
    "beat": "celery beat -S runledger: claims schedules, records and publishes fires, maintains the ledger",
    "worker": "Celery workers with runledger_beat.install(app): a run's state on its ledger row",
    "cli": "runledger-beat and the Python API: schedules, calendars, triggers, backfills, history, audit",
    "dashboard": "runledger-beat web reading only",
    "dashboard-writer": "runledger-beat web with a token: pause, resume, trigger, backfill",
}
#: Longest role name Postgres keeps whole (NAMEDATALEN - 1 bytes); a longer one would be cut silently.
MAX_ROLE_BYTES = 63


def check_role_name(role: str) -> str:
    """Return the role name, or raise ScheduleError("role", reason) for one no GRANT should name."""
    if not isinstance(role, str) or not role:
        raise ScheduleError("role", "give the name of a role")
    if "\x00" in role:
        raise ScheduleError("role", "a role name cannot hold a NUL character")
    if len(role.encode("utf-8", "surrogatepass")) > MAX_ROLE_BYTES:
        raise ScheduleError("role", f"longer than {MAX_ROLE_BYTES} bytes (Postgres would cut it)")
    if role.lower() == "public":
        raise ScheduleError("role", "PUBLIC is every role: name the one role to grant to")
    return role


def statements(kind: str, role: str, schema: str = DEFAULT_SCHEMA) -> list[sql.Composed]:
    """The statements granting ``role`` what a role of ``kind`` needs on ``schema``, in order."""
    if kind not in KINDS:
        raise ScheduleError("kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")
    names = {"schema": sql.Identifier(check_schema_name(schema)), "role": sql.Identifier(check_role_name(role))}
    template = getattr(queries, "grants_" + kind.replace("-", "_"))
    return [sql.SQL(text.strip()).format(**names) for text in template.split(";\n")]


def render(kind: str, role: str, schema: str = DEFAULT_SCHEMA) -> str:
    """The statements as SQL text, one per line block, each ending with a semicolon."""
    return "\n".join(statement.as_string(None) + ";" for statement in statements(kind, role, schema))
