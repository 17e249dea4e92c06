"""`runledger-beat doctor`: check that beat can work here, one verdict line per check.

Checks, in order: the database answers; whether a transaction-mode pooler
stands in front of it and the pool mode matches (pooling.py); the schema and its migrations
(applied vs shipped); the role's privileges on the tables, and on the functions
beat calls; clock skew between this host and the database; LISTEN/NOTIFY round
trip; beats alive; a worker hook seen lately (a ledger row started within the
last hour); and, with ``--app``, the broker and the app's beat_schedule (each
entry beat would refuse). Each check gives ``ok``, ``warn`` or ``FAIL`` with a
reason; the command exits 1 when any check failed, else 0.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from ..db.connect import connect
from ..db.migrate import migration_files
from ..db.ops_store import OpsStore
from ..db.redaction import redact_dsn, safe_error
from ..errors import ConfigError
from .pooling import pool_check

OK, WARN, FAIL = "ok", "warn", "FAIL"
#: Clock skew above this many seconds is worth a warning.
MAX_SKEW = 1.0
#: How long the LISTEN round trip may take.
LISTEN_TIMEOUT = 2.0
#: Tables beat writes, and the privileges it needs on each.
NEEDED = {"job_schedules": ("select", "insert", "update"), "jobs": ("select", "insert", "update"),
          "beats": ("select", "insert", "update", "delete")}
#: Functions beat calls, and what it does without EXECUTE on each.
FUNCTIONS = {"runledger_advance_cursors(uuid[], timestamptz[], boolean[])":
             "its cursor moves are plain UPDATEs, each one logged in the audit log as a change",
             "runledger_maintain_ledger(interval, integer)": "no day partitions are made ahead nor dropped"}


@dataclass
class Check:
    """One verdict."""

    name: str
    verdict: str
    detail: str

    def line(self) -> str:
        return f"{self.verdict:<4}  {self.name}: {self.detail}"


def diagnose(dsn: str, schema: str, app: Any = None) -> list[Check]:
    """Run every check; never raises for what it finds."""
    checks: list[Check] = []
    try:
        conn = connect(dsn, schema, autocommit=True, application_name="runledger_beat.doctor")
    except psycopg.Error as exc:
        checks.append(Check("database", FAIL, f"cannot connect to {redact_dsn(dsn)}: {safe_error(exc, dsn)}"))
    else:
        with conn:
            checks.append(Check("database", OK, f"connected to {redact_dsn(dsn)} "
                                f"(PostgreSQL {conn.info.server_version // 10000}, role {conn.info.user})"))
            store = OpsStore(conn)
            _run(checks, "pool mode", lambda: _pool_mode(dsn, schema, app))
            _run(checks, "migrations", lambda: _migrations(store, schema))
            usable = _schema_usable(store, schema)
            for name, step in (("privileges", lambda: _privileges(store, schema)),
                               ("functions", lambda: _functions(store, schema)),
                               ("clock", lambda: _clock(store)),
                               ("listen", lambda: _listen(store)),
                               ("beats", lambda: _beats(store)),
                               ("worker hook", lambda: _worker_hook(store))):
                if usable or name in ("clock", "listen"):  # the rest needs the schema
                    _run(checks, name, step)
    checks.append(_broker(app))
    if app is not None:
        checks.append(_beat_schedule(app))
    return checks


def _run(checks: list[Check], name: str, step: Callable[[], tuple[str, str]]) -> bool:
    """Append the check's verdict (a database error is its FAIL); whether it did not fail."""
    try:
        verdict, detail = step()
    except psycopg.Error as exc:
        verdict, detail = FAIL, safe_error(exc)
    checks.append(Check(name, verdict, detail))
    return verdict != FAIL


def _pool_mode(dsn: str, schema: str, app: Any) -> tuple[str, str]:
    try:
        return pool_check(dsn, schema, app)
    except ConfigError as exc:
        return FAIL, str(exc)


def _schema_usable(store: OpsStore, schema: str) -> bool:
    try:
        state = store.doctor_schema(schema)
    except psycopg.Error:
        return False
    return bool(state["present"] and state["usage"])


def _migrations(store: OpsStore, schema: str) -> tuple[str, str]:
    state = store.doctor_schema(schema)
    if not state["present"]:
        return FAIL, f"schema {schema!r} does not exist (run `runledger-beat migrate`, or start beat)"
    if not state["usage"]:
        return FAIL, f"this role may not use schema {schema!r} (GRANT USAGE ON SCHEMA {schema} TO ...)"
    if not state["migrations_table"]:
        return FAIL, f"schema {schema!r} has no runledger tables (run `runledger-beat migrate`)"
    try:
        applied = set(store.applied_migrations())
    except psycopg.errors.InsufficientPrivilege:
        return WARN, ("this role may not read schema_migrations: fine for a beat with runledger_auto_migrate "
                      "off, but it cannot migrate")
    shipped = {version: name for version, name, _ in migration_files()}
    pending = [shipped[v] for v in sorted(set(shipped) - applied)]
    unknown = sorted(applied - set(shipped))
    if pending:
        return WARN, (f"{len(pending)} shipped migration(s) not applied: {', '.join(pending)} (beat applies them "
                      "at start with runledger_auto_migrate; else run `runledger-beat migrate`)")
    if unknown:
        return WARN, (f"the database has migration(s) {', '.join(map(str, unknown))} this version does not ship "
                      "(an older runledger-beat than the one that migrated it?)")
    return OK, f"{len(applied)} migration(s) applied, as shipped"


def _privileges(store: OpsStore, schema: str) -> tuple[str, str]:
    missing = []
    for row in store.table_privileges(schema, list(NEEDED)):
        if not row["present"]:
            missing.append(f"{row['name']} (no such table)")
            continue
        lacking = [p.upper() for p in NEEDED[row["name"]] if not row[f"can_{p}"]]
        if lacking:
            missing.append(f"{'/'.join(lacking)} on {row['name']}")
    if missing:
        return FAIL, "this role lacks " + ", ".join(missing)
    return OK, "SELECT/INSERT/UPDATE on " + ", ".join(NEEDED) + " (and DELETE on beats)"


def _functions(store: OpsStore, schema: str) -> tuple[str, str]:
    """Beat works without these grants, but less well: a warning naming the GRANT to add."""
    rows = store.function_privileges(schema, list(FUNCTIONS))
    absent = [r["signature"] for r in rows if not r["present"]]
    denied = [r["signature"] for r in rows if r["present"] and not r["can_execute"]]
    if absent:
        return WARN, (f"{', '.join(absent)} not in schema {schema!r} (run `runledger-beat migrate`)")
    if denied:
        grant = ", ".join(f"{schema}.{signature}" for signature in denied)
        return WARN, ("this role may not EXECUTE " + "; ".join(f"{s} ({FUNCTIONS[s]})" for s in denied)
                      + f": GRANT EXECUTE ON FUNCTION {grant} TO {store.conn.info.user} (see `runledger-beat grants "
                      "beat`)")
    return OK, "EXECUTE on " + ", ".join(s.split("(")[0] for s in FUNCTIONS)


def _clock(store: OpsStore) -> tuple[str, str]:
    before = time.time()
    db_now = store.db_clock().timestamp()
    after = time.time()
    skew = db_now - (before + after) / 2
    text = f"this host's clock is {abs(skew):.3f}s {'behind' if skew > 0 else 'ahead of'} the database's"
    if abs(skew) > MAX_SKEW:
        return WARN, (text + " (due-ness follows the database clock, so fires are still on time; "
                      "but logs and local waits disagree: run NTP)")
    return OK, text


def _listen(store: OpsStore) -> tuple[str, str]:
    if store.listen_round_trip(LISTEN_TIMEOUT):
        return OK, "LISTEN/NOTIFY round trip works (beats wake at once on schedule changes)"
    return WARN, (f"a NOTIFY did not come back within {LISTEN_TIMEOUT:g}s (a transaction-mode pooler?); "
                  "set runledger_listen_dsn to a direct connection, or beats poll every runledger_poll_interval")


def _beats(store: OpsStore) -> tuple[str, str]:
    row = store.freshest_beat()
    if row["age_seconds"] is None:
        return WARN, "no beat has registered (none running, or none since the 0005 migration)"
    if row["age_seconds"] > 30:
        return WARN, f"{row['beats']} beat row(s), the freshest ticked {row['age_seconds']:.0f}s ago: none alive?"
    return OK, f"{row['beats']} beat row(s), the freshest ticked {row['age_seconds']:.1f}s ago"


def _worker_hook(store: OpsStore) -> tuple[str, str]:
    started = store.recent_start()
    if started is None:
        return WARN, ("unknown: no ledger row started within the last hour (nothing ran, or the workers lack "
                      "runledger_beat.install(app))")
    return OK, f"workers report runs (the latest started at {started.isoformat()})"


def _broker(app: Any) -> Check:
    if app is None:
        return Check("broker", WARN, "not checked (give --app proj.celery to check the broker)")
    conn = app.connection_for_write(connect_timeout=3)
    uri = conn.as_uri()  # password masked
    try:
        conn.ensure_connection(max_retries=1, interval_start=0.2, interval_step=0.2, timeout=5)
    except Exception as exc:
        return Check("broker", FAIL, f"cannot connect to {uri}: {type(exc).__name__}: {' '.join(str(exc).split())}")
    finally:
        conn.release()
    return Check("broker", OK, f"connected to {uri}")


def _beat_schedule(app: Any) -> Check:
    """FAIL naming each beat_schedule entry beat refuses (it would never fire), else ok with the count."""
    from ..imports.beat_schedule import refused_entries
    entries = app.conf.beat_schedule or {}
    refused = refused_entries(app, entries)
    if refused:
        return Check("beat_schedule", FAIL, f"{len(refused)} of {len(entries)} entries refused, never scheduled: "
                     + "; ".join(refused.values()))
    return Check("beat_schedule", OK, f"all {len(entries)} entries import" if entries else "no entries")


def as_json(checks: list[Check]) -> dict:
    """{"ok": no check failed, "checks": [{"name", "verdict", "detail"}, ...]}."""
    return {"ok": all(c.verdict != FAIL for c in checks), "checks": [asdict(c) for c in checks]}
