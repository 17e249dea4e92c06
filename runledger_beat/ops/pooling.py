"""`runledger-beat doctor`'s pool check: is a transaction-mode pooler (PgBouncer) between here and Postgres, and
is the pool mode set to match?

Detection needs no pooler-specific command (``SHOW pool_mode`` answers only on PgBouncer's admin console, which
an application's DSN does not name). Two client sessions, A and B, each ask which server process
(``pg_backend_pid()``) their transaction runs on: A once, then B while A stays connected (B's transaction kept
open), then A again. A direct connection, or a session pooler, keeps each session on one server process for
its whole life, so B's differs from A's and A's never changes. A transaction pooler hands a server process
back to its pool at each commit: B then gets A's (PgBouncer reuses the last one freed), or A comes back on
another. Either sighting proves transaction pooling; a pooler that kept every probe on the same process would
be reported as none, which is why the probe is made three times.
"""

from __future__ import annotations

import contextlib

import psycopg

from ..db.connect import POOL_MODE_ENV, check_pool_mode, connect
from ..db.ops_store import OpsStore

#: Probes made before concluding that sessions stay on their server process.
PROBES = 3


def _pid_in_transaction(conn: psycopg.Connection) -> int:
    with conn.transaction():
        return OpsStore(conn).backend_pid()


def transaction_pooled(dsn: str, schema: str) -> bool:
    """Whether the server processes behind ``dsn`` change between one session's transactions (see the module
    docstring); raises psycopg errors when it cannot connect."""
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(connect(dsn, schema, autocommit=True, application_name="runledger_beat.doctor",
                                        pool_mode="transaction"))
        b = stack.enter_context(connect(dsn, schema, autocommit=True, application_name="runledger_beat.doctor",
                                        pool_mode="transaction"))
        for _ in range(PROBES):
            first = _pid_in_transaction(a)
            with b.transaction():  # B holds its server process while A asks again
                other = OpsStore(b).backend_pid()
                again = _pid_in_transaction(a)
            if other == first or again != first:
                return True
    return False


def pool_check(dsn: str, schema: str, app: object = None) -> tuple[str, str]:
    """(verdict, detail) for doctor: FAIL when a transaction pooler is found and the pool mode is not
    "transaction" (beats and workers would use prepared statements and LISTEN it cannot carry)."""
    conf = getattr(app, "conf", None)
    configured = conf.get("runledger_pool_mode") if conf is not None else None
    mode = check_pool_mode(configured)
    where = "runledger_pool_mode" if configured is not None else POOL_MODE_ENV
    if transaction_pooled(dsn, schema):
        if mode == "transaction":
            return "ok", (f"a transaction-mode pooler is in front of Postgres and {where} is \"transaction\" (no "
                          "prepared statements; LISTEN only over runledger_listen_dsn, else beats poll)")
        return "FAIL", ("a transaction-mode pooler is in front of Postgres (one session's transactions ran on "
                        "different server processes): set runledger_pool_mode = \"transaction\" for beat and the "
                        f"workers, and {POOL_MODE_ENV}=transaction for the CLI and the API")
    if mode == "transaction":
        return "warn", (f"{where} is \"transaction\" but sessions keep their server process (no transaction "
                        "pooler seen): prepared statements and LISTEN are off for nothing")
    return "ok", "sessions keep their server process (a direct connection or a session pooler): pool mode session"
