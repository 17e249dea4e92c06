"""The stores run the named statements of sql/*.sql, one class per role, each over one connection.

``BeatStore`` (beat_store.py), ``WorkerStore`` (worker_store.py), ``ScheduleStore`` (schedule_store.py) and
``OpsStore`` (ops_store.py) wrap one psycopg connection (dict rows, search_path on the runledger schema: see
connect.py) and offer a method per statement, named for what it means. No store commits: the caller owns the
transaction, because the fire pipeline must decide exactly where a claim ends. Array parameters travel in
binary (``%(name)b`` in the SQL), which matters for batches of thousands.
"""

from __future__ import annotations

from typing import Any

import psycopg

#: Payload of a notification asking the beats to sweep the outbox now (ScheduleStore.notify_outbox).
OUTBOX_PAYLOAD = "outbox"


class Store:
    """The connection and the two fetch helpers every role's store shares."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def _one(self, statement: str, params: dict[str, Any] | None = None) -> dict | None:
        return self.conn.execute(statement, params or {}).fetchone()

    def _all(self, statement: str, params: dict[str, Any] | None = None) -> list[dict]:
        return self.conn.execute(statement, params or {}).fetchall()
