"""One scheduling pass: claim due schedules, record their fires, advance their cursors.

Everything here runs in the caller's transaction, which is committed before any
fire is published. The fast path is set-based (one INSERT and one UPDATE per
batch); if the batch's SQL fails, the seed's per-schedule savepoints take over so
one bad row is rolled back and deferred alone.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from . import queries
from .payload import merge_schedule_metadata, schedule_metadata
from .schedule_row import timing_from_row
from .timeengine import advance

log = logging.getLogger("runledger_beat.materialize")

FAILED_SCHEDULE_RETRY_DELAY_SECONDS = 30


class ClaimedScheduleMissing(Exception):
    """A schedule claimed in this transaction vanished; the whole batch is rolled back."""

    def __init__(self, schedule_id: uuid.UUID, operation: str) -> None:
        super().__init__(f"claimed schedule {schedule_id} is missing while {operation}")
        self.schedule_id = schedule_id


@dataclass(frozen=True)
class Fire:
    """A fire recorded in the ledger and due to be published once committed."""

    id: uuid.UUID
    schedule_id: uuid.UUID | None
    schedule_name: str | None
    job_type: str
    payload: Any
    options: dict[str, Any]
    scheduled_for: datetime | None


@dataclass
class _Plan:
    row: dict[str, Any]
    next_fire_at: datetime | None
    status: str | None            # ledger status of the slot, None = nothing recorded
    note: str | None = None
    ledger_id: uuid.UUID = field(default_factory=uuid.uuid4)
    payload: Any = None


@dataclass
class PassResult:
    """What one pass did: fires to publish and counts for logs and tests."""

    claimed: int = 0
    fires: list[Fire] = field(default_factory=list)
    skipped: int = 0
    deferred: int = 0


def _plan(row: dict[str, Any]) -> _Plan:
    """Decide one claimed schedule's fire and next cursor (pure; raises on a bad row)."""
    timing = timing_from_row(row)
    scheduled_for = row["next_fire_at"]
    step = advance(timing, scheduled_for, row["db_now"], row["id"])
    if not step.fire:
        status, note = "skipped", f"misfire: slot missed (policy {timing.misfire})"
    elif row.get("busy"):
        status, note = "skipped", "overlap: previous run still queued or running"
    else:
        status, note = "pending", None
    plan = _Plan(row=row, next_fire_at=step.next_fire_at, status=status, note=note)
    meta = schedule_metadata(row["id"], row["name"], scheduled_for)
    plan.payload = merge_schedule_metadata(row["payload_template"], meta)
    return plan


def _fires_of(plans: list[_Plan], inserted: set[uuid.UUID]) -> list[Fire]:
    return [
        Fire(p.ledger_id, p.row["id"], p.row["name"], p.row["job_type"], p.payload,
             p.row.get("options") or {}, p.row["next_fire_at"])
        for p in plans if p.status == "pending" and p.ledger_id in inserted
    ]


def _write(conn: psycopg.Connection, plans: list[_Plan]) -> set[uuid.UUID]:
    """Insert the ledger rows and advance the cursors of ``plans`` in two statements."""
    recorded = [p for p in plans if p.status is not None]
    inserted: set[uuid.UUID] = set()
    if recorded:
        cur = conn.execute(queries.insert_fires, {
            "ids": [p.ledger_id for p in recorded],
            "schedule_ids": [p.row["id"] for p in recorded],
            "scheduled_fors": [p.row["next_fire_at"] for p in recorded],
            "payloads": [json.dumps(p.payload) for p in recorded],
            "statuses": [p.status for p in recorded],
            "notes": [p.note for p in recorded],
        })
        inserted = {r["id"] for r in cur.fetchall()}
    cur = conn.execute(queries.advance_cursors, {
        "ids": [p.row["id"] for p in plans],
        "next_fire_ats": [p.next_fire_at for p in plans],
        "fired": [p.status == "pending" for p in plans],
    })
    if cur.rowcount != len(plans):
        missing = _missing(conn, plans)
        raise ClaimedScheduleMissing(missing, "marking schedule as fired")
    return inserted


def _missing(conn: psycopg.Connection, plans: list[_Plan]) -> uuid.UUID:
    ids = [p.row["id"] for p in plans]
    found = {r["id"] for r in conn.execute(
        "SELECT id FROM job_schedules WHERE id = ANY(%(ids)s::uuid[])", {"ids": ids})}
    return next(i for i in ids if i not in found)


def _defer(conn: psycopg.Connection, row: dict[str, Any], error: BaseException, delay: float) -> None:
    log.warning("schedule materialization failed; deferring %ss: schedule_id=%s schedule_name=%s error=%s",
                delay, row["id"], row["name"], error)
    cur = conn.execute(queries.defer_schedule, {"id": row["id"], "delay": delay})
    if cur.rowcount == 0:
        raise ClaimedScheduleMissing(row["id"], "deferring failed schedule")


def materialize_claimed(conn: psycopg.Connection, rows: list[dict[str, Any]],
                        defer_seconds: float = FAILED_SCHEDULE_RETRY_DELAY_SECONDS) -> PassResult:
    """Record fires and advance cursors for rows claimed in this transaction."""
    result = PassResult(claimed=len(rows))
    plans: list[_Plan] = []
    for row in rows:
        try:
            plans.append(_plan(row))
        except Exception as exc:  # a corrupt row must never stop the others
            _defer(conn, row, exc, defer_seconds)
            result.deferred += 1
    if not plans:
        return result
    try:
        with conn.transaction():  # savepoint around the set-based fast path
            inserted = _write(conn, plans)
        result.fires = _fires_of(plans, inserted)
    except ClaimedScheduleMissing:
        raise
    except psycopg.DatabaseError as exc:
        if isinstance(exc, psycopg.OperationalError):
            raise
        log.warning("batch write failed (%s); retrying schedule by schedule", exc)
        result.fires = _write_one_by_one(conn, plans, defer_seconds, result)
    result.skipped = sum(1 for p in plans if p.status == "skipped")
    return result


def _write_one_by_one(conn: psycopg.Connection, plans: list[_Plan], defer_seconds: float,
                      result: PassResult) -> list[Fire]:
    """The seed's path: a savepoint per schedule; a failing one is rolled back and deferred."""
    fires: list[Fire] = []
    for plan in plans:
        try:
            with conn.transaction():
                inserted = _write(conn, [plan])
            fires.extend(_fires_of([plan], inserted))
        except ClaimedScheduleMissing:
            raise
        except psycopg.DatabaseError as exc:
            if isinstance(exc, psycopg.OperationalError):
                raise
            _defer(conn, plan.row, exc, defer_seconds)
            result.deferred += 1
    return fires


def claim_due(conn: psycopg.Connection, limit: int) -> list[dict[str, Any]]:
    """Lock up to ``limit`` due schedules in this transaction (database clock, SKIP LOCKED)."""
    conn.execute(queries.mark_internal)
    return conn.execute(queries.claim_due_schedules, {"limit": limit}).fetchall()


def run_pass(conn: psycopg.Connection, batch_size: int,
             defer_seconds: float = FAILED_SCHEDULE_RETRY_DELAY_SECONDS) -> PassResult:
    """One transaction: claim a batch, materialize it, commit. Fires are returned for publishing."""
    with conn.transaction():
        rows = claim_due(conn, batch_size)
        return materialize_claimed(conn, rows, defer_seconds)
