"""Schedules as the API, the command line and the importer read and write them (sql/schedules.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from psycopg.types.json import Jsonb

from .store import Store


class ScheduleStore(Store):
    """Schedules as the API, the command line and the importer read and write them."""

    def db_now(self) -> datetime:
        """The database clock, which judges due-ness."""
        return self._one(self.q.api_db_now)["now"]

    def schedule(self, name: str, lock: bool = False) -> dict | None:
        """One schedule row by name (locked for a read-modify-write with ``lock``)."""
        return self._one(self.q.api_lock_schedule if lock else self.q.api_get_schedule, {"name": name})

    def insert_schedule(self, row: dict[str, Any]) -> dict:
        """Create a schedule from full column values; returns the stored row."""
        return self._one(self.q.api_insert_schedule, _json_columns(row))

    def update_schedule(self, row: dict[str, Any]) -> dict:
        """Replace a schedule's definition and cursor (by id); returns the stored row."""
        return self._one(self.q.api_update_schedule, _json_columns(row))

    def schedules(self, task: str | None = None, organization_id: str | None = None,
                  active: bool | None = None) -> list[dict]:
        """Schedules by name, optionally filtered."""
        return self._all(self.q.api_list_schedules,
                         {"task": task, "organization_id": organization_id, "active": active})

    def set_active(self, schedule_id: uuid.UUID, active: bool, next_fire_at: datetime | None) -> dict:
        """Pause or resume a schedule with its new cursor; returns the row."""
        return self._one(self.q.api_set_active, {"id": schedule_id, "active": active, "next_fire_at": next_fire_at})

    def delete_schedule(self, name: str) -> bool:
        """Remove a schedule (its ledger rows stay); False when there was none."""
        return self._one(self.q.api_delete_schedule, {"name": name}) is not None

    def insert_manual_job(self, job: dict[str, Any]) -> dict:
        """Record a manual trigger as a pending ledger row; returns it."""
        return self._one(self.q.api_insert_manual_job,
                         dict(job, payload=Jsonb(job["payload"]), options=Jsonb(job["options"] or {})))

    def notify_schedules(self) -> None:
        """Wake the running beats."""
        self.conn.execute(self.q.api_notify_schedules)

    def history(self, name: str, status: str | None, limit: int) -> list[dict]:
        """The latest ledger rows of a schedule, newest first."""
        return self._all(self.q.api_history, {"name": name, "status": status, "limit": limit})

    def config_schedules(self) -> list[dict]:
        """Every schedule imported from a Celery beat_schedule."""
        return self._all(self.q.api_config_schedules)

    def deactivate_config(self, schedule_ids: Sequence[uuid.UUID]) -> list[str]:
        """Deactivate config schedules whose entry left the beat_schedule; returns their names."""
        return [r["name"] for r in self._all(self.q.api_deactivate_config, {"ids": list(schedule_ids)})]

    def pause_schedule(self, schedule_id: uuid.UUID, note: str | None) -> dict:
        """Pause a schedule, recording the note, when and who (role, application_name); returns the row."""
        return self._one(self.q.feature_pause_schedule, {"id": schedule_id, "note": note})

    def clear_pause(self, schedule_id: uuid.UUID) -> dict | None:
        """Forget a schedule's pause note; returns the row, or None when it had none."""
        return self._one(self.q.feature_clear_pause, {"id": schedule_id})

    def audit(self, name: str | None, since_seconds: float | None, limit: int = 10000) -> list[dict]:
        """Audit log entries (oldest first), optionally of one schedule and within a recent window."""
        return self._all(self.q.feature_audit, {"name": name, "since": since_seconds, "limit": limit})

    def insert_backfill(self, schedule_id: uuid.UUID, ids: Sequence[uuid.UUID], scheduled_fors: Sequence[datetime],
                        payloads: Sequence[str]) -> list[dict]:
        """Record backfill slots as pending ledger rows (payloads as JSON text); returns {id, scheduled_for}
        of the rows inserted (a slot already recorded is not)."""
        return self._all(self.q.feature_insert_backfill, {
            "schedule_id": schedule_id, "ids": list(ids), "scheduled_fors": list(scheduled_fors),
            "payloads": list(payloads)})

    def notify_outbox(self) -> None:
        """Wake the running beats and have them sweep for pending rows to publish at once (at commit)."""
        self.conn.execute(self.q.feature_notify_outbox)

    def add_calendar(self, name: str, dates: Sequence[date]) -> dict:
        """Create a calendar or add dates to it; returns it."""
        return self._one(self.q.feature_calendar_add, {"name": name, "dates": sorted(dates)})

    def calendar(self, name: str) -> dict | None:
        """One calendar, or None."""
        return self._one(self.q.feature_calendar_get, {"name": name})

    def calendars(self) -> list[dict]:
        """Every calendar with the names of the schedules using it."""
        return self._all(self.q.feature_calendar_list)

    def calendar_users(self, name: str) -> list[str]:
        """Names of the schedules using a calendar."""
        return [r["name"] for r in self._all(self.q.feature_calendar_users, {"name": name})]

    def delete_calendar(self, name: str) -> bool:
        """Remove a calendar no schedule uses; False when there was none."""
        return self._one(self.q.feature_calendar_delete, {"name": name}) is not None

    def clear_schedule_faults(self, schedule_ids: Sequence[uuid.UUID]) -> None:
        """Forget the failures of schedules that fired or were resumed."""
        self.conn.execute(self.q.clear_schedule_faults, {"ids": list(schedule_ids)})


def _json_columns(row: dict[str, Any]) -> dict[str, Any]:
    """Column values with the jsonb columns wrapped for psycopg."""
    out = dict(row)
    out["payload_template"] = Jsonb(row["payload_template"])
    out["options"] = Jsonb(row["options"] or {})
    return out
