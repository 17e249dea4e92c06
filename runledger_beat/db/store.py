"""The stores run the named statements of sql/*.sql, one class per role, each over one connection.

``BeatStore`` (beat_store.py), ``WorkerStore`` (worker_store.py), ``ScheduleStore`` (schedule_store.py) and
``OpsStore`` (ops_store.py) wrap one psycopg connection (dict rows: see connect.py) and run its statements with
every runledger name schema-qualified (``queries.for_schema``), so nothing depends on session state; they
offer a method per statement, named for what it means. No store commits: the caller owns the transaction,
because the fire pipeline must decide exactly where a claim ends. Array parameters travel in
binary (``%(name)b`` in the SQL), which matters for batches of thousands.
"""

from __future__ import annotations

from typing import Any

import psycopg

from . import queries
from .connect import connection_schema

#: Payload of a notification asking the beats to sweep the outbox now (ScheduleStore.notify_outbox).
OUTBOX_PAYLOAD = "outbox"


class Store:
    """The connection, its statements (qualified with the schema ``connect()`` opened it for; unqualified on a
    caller's own connection) and the two fetch helpers every role's store shares."""

    def __init__(self, conn: psycopg.Connection, schema: str | None = None) -> None:
        self.conn = conn
        self.q = queries.for_schema(schema or connection_schema(conn))

    def _one(self, statement: str, params: dict[str, Any] | None = None) -> dict | None:
        return self.conn.execute(statement, params or {}).fetchone()

    def _all(self, statement: str, params: dict[str, Any] | None = None) -> list[dict]:
        return self.conn.execute(statement, params or {}).fetchall()
