"""What the operator surfaces read: partitions, beats, health, doctor checks, the dashboard and stats
(sql/operations.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .store import Store


class OpsStore(Store):
    """What the operator surfaces read."""

    def ledger_partitions(self) -> list[dict]:
        """The ledger's partitions (name, holds, rows_estimate, bytes), oldest first, the default last."""
        return self._all(self.q.ledger_partitions)

    def beats(self) -> list[dict]:
        """Every beat's row with ``age_seconds`` since its last tick, freshest first."""
        return self._all(self.q.beats_list)

    def freshest_beat(self, host: str | None = None) -> dict:
        """{"beats": how many rows (of ``host`` only, when given), "age_seconds": since the freshest tick,
        None when there is none}."""
        return self._one(self.q.beats_freshest, {"host": host})

    def schedules_page(self, *, after: str | None, limit: int, task: str | None = None,
                       contains: str | None = None, prefix: str | None = None) -> list[dict]:
        """At most ``limit`` schedule rows by name after ``after`` (with fault records), of ``task``, matching the
        ILIKE pattern ``contains`` or the lower-case LIKE pattern ``prefix`` when given."""
        return self._all(self.q.web_schedules_page, {"after": after, "limit": int(limit), "task": task,
                                                      "contains": contains, "prefix": prefix})

    def search_mode(self) -> str:
        """'substring' when the trigram index exists (pg_trgm was available to migration 0009), else 'prefix'."""
        return self._one(self.q.web_search_mode)["mode"]

    def schedules_estimate(self) -> int:
        """How many schedules the planner thinks there are (reads no rows)."""
        plan = self._one(self.q.web_schedules_estimate)["QUERY PLAN"]
        return int(plan[0]["Plan"]["Plan Rows"])

    def schedules_count(self) -> int:
        """How many schedules there are, exactly (scans the table)."""
        return int(self._one(self.q.web_schedules_count)["n"])

    def last_fires(self, schedule_ids: Sequence[Any]) -> dict[uuid.UUID, dict]:
        """{schedule id: its latest ledger row's status, stage, scheduled_for, sent_at, lag_seconds} of the
        schedules ``schedule_ids``."""
        return {r["schedule_id"]: r for r in self._all(self.q.web_last_fires, {"ids": list(schedule_ids)})}

    def lag_series(self, schedule_id: Any, limit: int) -> list[dict]:
        """scheduled_for and lag_seconds (sent_at - scheduled_for) of a schedule's last ``limit`` sent fires,
        oldest first."""
        return self._all(self.q.web_lag_series, {"id": schedule_id, "limit": int(limit)})

    def faulted_schedules(self, limit: int) -> list[dict]:
        """The first ``limit`` schedules with a fault record (failures, last_error, retry_at, quarantined_at),
        quarantined first."""
        return self._all(self.q.web_faulted_schedules, {"limit": int(limit)})

    def failed_jobs(self, limit: int) -> list[dict]:
        """The newest ``limit`` ledger rows with status failed, lost or expired."""
        return self._all(self.q.web_failed_jobs, {"limit": int(limit)})

    def job_stats(self, name: str | None, since_seconds: float | None, *, after: str | None = None,
                  limit: int) -> list[dict]:
        """Per schedule of one page by name (after ``after``, at most ``limit``; only ``name`` when given): counts
        by status and lag percentiles (total 0 for a schedule without ledger rows)."""
        return self._all(self.q.job_stats, {"name": name, "since": since_seconds, "after": after,
                                             "limit": int(limit)})

    def doctor_schema(self, schema: str) -> dict:
        """{"present", "usage", "migrations_table"} of ``schema`` for this role."""
        return self._one(self.q.doctor_schema, {"schema": schema})

    def applied_migrations(self) -> list[int]:
        """Versions recorded in schema_migrations."""
        return [r["version"] for r in self._all(self.q.applied_migrations)]

    def table_privileges(self, schema: str, tables: Sequence[str]) -> list[dict]:
        """Per table: present, can_select, can_insert, can_update, can_delete (None when absent)."""
        return self._all(self.q.doctor_privileges, {"schema": schema, "tables": list(tables)})

    def function_privileges(self, schema: str, signatures: Sequence[str]) -> list[dict]:
        """Per function signature: present, can_execute (None when absent)."""
        return self._all(self.q.doctor_functions, {"schema": schema, "signatures": list(signatures)})

    def db_clock(self) -> datetime:
        """The database's clock_timestamp()."""
        return self._one(self.q.doctor_clock)["now"]

    def listen_round_trip(self, timeout: float) -> bool:
        """LISTEN, NOTIFY ourselves, and whether the notification arrived within ``timeout`` s (autocommit)."""
        token = uuid.uuid4().hex
        self.conn.execute(self.q.doctor_listen)
        try:
            self.conn.execute(self.q.doctor_notify, {"token": token})
            return any(n.payload == token for n in self.conn.notifies(timeout=timeout, stop_after=1))
        finally:
            self.conn.execute(self.q.doctor_unlisten)

    def recent_start(self) -> datetime | None:
        """The latest started_at within the last hour (a worker hook at work), else None."""
        return self._one(self.q.doctor_recent_start)["started_at"]

    def backend_pid(self) -> int:
        """The server process the current transaction runs on."""
        return int(self._one(self.q.doctor_backend)["pid"])
