"""Schedule rows written with raw SQL, as an operator or another service might."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import psycopg


def insert_schedule(conn: psycopg.Connection, name: str, *, task: str = "rl.record", cron: str | None = "* * * * * *",
                    kind: str = "cron", every: float | None = None, next_fire_at: datetime | str | None = None,
                    template: Any = None, schedule_id: uuid.UUID | None = None, options: dict | None = None,
                    overlap: str = "allow", jitter: int = 0, tz: str = "UTC") -> uuid.UUID:
    """Insert one schedule row; next_fire_at defaults to the database's now()."""
    schedule_id = schedule_id or uuid.uuid4()
    template = {"args": [name], "kwargs": {}} if template is None else template
    conn.execute(
        "INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, interval_seconds,"
        " next_fire_at, options, overlap_policy, max_jitter_seconds, timezone)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, coalesce(%s::timestamptz, now()), %s, %s, %s, %s)",
        (schedule_id, name, task, json.dumps(template), kind, cron, every, next_fire_at,
         json.dumps(options or {}), overlap, jitter, tz))
    return schedule_id


def ledger(conn: psycopg.Connection, schedule_id: uuid.UUID | None = None) -> list[dict]:
    if schedule_id is None:
        return conn.execute("SELECT * FROM jobs ORDER BY scheduled_for, created_at").fetchall()
    return conn.execute("SELECT * FROM jobs WHERE schedule_id = %s ORDER BY scheduled_for", (schedule_id,)).fetchall()


def snapshot(conn: psycopg.Connection) -> dict[str, list[dict]]:
    """Everything an attack could change: schedules, their faults, calendars, the ledger and the audit log."""
    queries = {"job_schedules": "SELECT * FROM job_schedules ORDER BY name",
               "schedule_faults": "SELECT * FROM schedule_faults ORDER BY schedule_id",
               "calendars": "SELECT * FROM calendars ORDER BY name",
               "jobs": "SELECT * FROM jobs ORDER BY scheduled_for, id",
               "schedule_changes": "SELECT * FROM schedule_changes ORDER BY id"}
    return {table: conn.execute(query).fetchall() for table, query in queries.items()}
