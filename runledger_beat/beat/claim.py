"""One scheduling pass: claim due schedules, plan each one's fire, record the fires, advance the cursors.

Everything here runs in the caller's transaction (through a ``BeatStore``); the
caller commits, and only then publishes. Recording is set-based (one INSERT and
one UPDATE per batch); if the batch's SQL fails, a savepoint per schedule takes
over so one bad row is rolled back and deferred alone. A row that cannot even be
planned (bad cron, unknown zone, corrupt value) is deferred without a fire.

A claim may look ``lookahead`` seconds ahead: the fire pipeline then records the
fires of one instant in a transaction it keeps open (holding the schedule rows'
locks) and commits it at that instant. See pipeline.py.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from ..db.beat_store import BeatStore
from ..db.redaction import safe_error
from ..errors import ScheduleError
from ..payload import merge_schedule_metadata, schedule_metadata
from ..publish.fires import Fire
from ..spec import check_row
from ..timing.engine import Advance, advance
from ..timing.rows import timing_from_row

log = logging.getLogger(__name__)

FAILED_SCHEDULE_RETRY_DELAY_SECONDS = 30
#: Fires less than this many seconds after the first cursor share its transaction.
GROUP_WINDOW_SECONDS = 0.05


@dataclass(frozen=True)
class FaultPolicy:
    """How a failing schedule is retried: after ``delay`` s, doubled per failure up to ``max_delay``;
    quarantined (never claimed again until resumed) at ``quarantine_after`` consecutive failures."""

    delay: float = FAILED_SCHEDULE_RETRY_DELAY_SECONDS
    max_delay: float = 3600.0
    quarantine_after: int = 5


class ClaimedScheduleMissing(Exception):
    """A schedule claimed in this transaction vanished; the whole batch is rolled back."""

    def __init__(self, schedule_id: uuid.UUID, operation: str) -> None:
        super().__init__(f"claimed schedule {schedule_id} is missing while {operation}")
        self.schedule_id = schedule_id


@dataclass
class _Plan:
    row: dict[str, Any]
    next_fire_at: datetime | None
    status: str | None            # ledger status of the slot, None = nothing recorded
    note: str | None = None
    ledger_id: uuid.UUID = field(default_factory=uuid.uuid4)
    payload: Any = None
    payload_text: str = ""


@dataclass
class PassResult:
    """What one pass did: fires to publish, the database clock it judged by, and counts."""

    claimed: int = 0
    fires: list[Fire] = field(default_factory=list)
    skipped: int = 0
    deferred: int = 0
    db_now: datetime | None = None
    clock_offset: float | None = None  # database clock minus local wall clock (s), read at the claim
    slots: list[tuple[uuid.UUID, datetime]] = field(default_factory=list)  # (schedule id, slot) of each claimed


def _plan(row: dict[str, Any], shared: dict[tuple, Advance]) -> _Plan:
    """Decide one claimed schedule's fire and next cursor (pure; raises on a bad row).

    ``shared`` memoises advance() within a pass for jitter-free timings, whose
    result does not depend on the schedule id: a burst of schedules sharing an
    expression and zone computes its next fire once.
    """
    check_row(row)
    timing = timing_from_row(row)
    scheduled_for = row["next_fire_at"]
    if timing.max_jitter == 0:
        key = (timing, scheduled_for, row["db_now"])
        step = shared.get(key)
        if step is None:
            step = shared[key] = advance(timing, scheduled_for, row["db_now"], row["id"])
    else:
        step = advance(timing, scheduled_for, row["db_now"], row["id"])
    if timing.skip_dates and timing.excludes_fire(scheduled_for):
        status, note = None, None  # a skip date added after the cursor was set: move past it, record nothing
    elif step.fire:
        status, note = "pending", None
    else:
        status, note = "skipped", f"misfire: slot missed (policy {timing.misfire})"
    plan = _Plan(row=row, next_fire_at=step.next_fire_at, status=status, note=note)
    meta = schedule_metadata(row["id"], row["name"], scheduled_for)
    plan.payload = merge_schedule_metadata(row["payload_template"], meta)
    plan.payload_text = json.dumps(plan.payload, allow_nan=False)
    return plan


def _fires_of(plans: list[_Plan], inserted: set[uuid.UUID]) -> list[Fire]:
    return [
        Fire(p.ledger_id, p.row["id"], p.row["name"], p.row["job_type"], p.payload,
             p.row.get("options") or {}, p.row["next_fire_at"], p.row.get("overlap_policy") == "skip",
             p.row.get("overlap_policy") or "allow")
        for p in plans if p.status == "pending" and p.ledger_id in inserted
    ]


def _write(store: BeatStore, plans: list[_Plan]) -> set[uuid.UUID]:
    """Insert the ledger rows and advance the cursors of ``plans`` in two statements."""
    recorded = [p for p in plans if p.status is not None]
    inserted: set[uuid.UUID] = set()
    if recorded:
        inserted = store.insert_fires(
            [p.ledger_id for p in recorded], [p.row["id"] for p in recorded],
            [p.row["next_fire_at"] for p in recorded], [p.payload_text for p in recorded],
            [p.status for p in recorded], [p.note for p in recorded])
    moved = store.advance_cursors([p.row["id"] for p in plans], [p.next_fire_at for p in plans],
                                  [p.status == "pending" for p in plans])
    if moved != len(plans):
        ids = [p.row["id"] for p in plans]
        found = store.existing_schedules(ids)
        raise ClaimedScheduleMissing(next(i for i in ids if i not in found), "marking schedule as fired")
    forgiven = [p.row["id"] for p in plans if p.row.get("failures")]
    if forgiven:
        store.clear_schedule_faults(forgiven)
    return inserted


def _defer(store: BeatStore, row: dict[str, Any], error: BaseException, policy: FaultPolicy) -> None:
    """Record the schedule's failure: retried later with back-off, quarantined after repeats (the row is untouched)."""
    text = f"{type(error).__name__}: {error}" if not isinstance(error, ScheduleError) else str(error)
    fault = store.record_schedule_fault(row["id"], text, policy.delay, policy.max_delay, policy.quarantine_after)
    if fault is None:
        raise ClaimedScheduleMissing(row["id"], "deferring failed schedule")
    if fault["quarantined_at"] is not None:
        log.error("runledger: schedule %r (%s) quarantined after %d failures: %s; fix it and run "
                  "`runledger-beat resume %s`", row.get("name"), row["id"], fault["failures"], text, row.get("name"))
    else:
        log.warning("runledger: schedule %r (%s) failed (%s); failure %d, retrying at %s", row.get("name"),
                    row["id"], text, fault["failures"], fault["retry_at"])


def record_claimed(store: BeatStore, rows: list[dict[str, Any]], policy: FaultPolicy = FaultPolicy()) -> PassResult:
    """Record fires and advance cursors for rows claimed in this transaction."""
    result = PassResult(claimed=len(rows), db_now=rows[0]["db_now"] if rows else None,
                        slots=[(row["id"], row["next_fire_at"]) for row in rows])
    plans: list[_Plan] = []
    shared: dict[tuple, Advance] = {}
    for row in rows:
        try:
            plans.append(_plan(row, shared))
        except Exception as exc:  # a corrupt row must never stop the others
            _defer(store, row, exc, policy)
            result.deferred += 1
    if not plans:
        return result
    try:
        with store.conn.transaction():  # savepoint around the set-based path
            inserted = _write(store, plans)
        result.fires = _fires_of(plans, inserted)
    except ClaimedScheduleMissing:
        raise
    except psycopg.DatabaseError as exc:
        if isinstance(exc, psycopg.OperationalError):
            raise
        log.warning("batch write failed (%s); retrying schedule by schedule", exc)
        result.fires = _write_one_by_one(store, plans, policy, result)
    result.skipped = sum(1 for p in plans if p.status == "skipped")
    return result


def _write_one_by_one(store: BeatStore, plans: list[_Plan], policy: FaultPolicy, result: PassResult) -> list[Fire]:
    """A savepoint per schedule: a failing one is rolled back and deferred alone."""
    fires: list[Fire] = []
    for plan in plans:
        try:
            with store.conn.transaction():
                inserted = _write(store, [plan])
            fires.extend(_fires_of([plan], inserted))
        except ClaimedScheduleMissing:
            raise
        except psycopg.DatabaseError as exc:
            if isinstance(exc, psycopg.OperationalError):
                raise
            _defer(store, plan.row, exc, policy)
            result.deferred += 1
    return fires


def clock_offset(store: BeatStore) -> float:
    """Mark this transaction internal (no NOTIFY to other beats); return database minus local clock (s).

    The local clock is read after the answer arrives, so the offset errs low by
    the return trip: instants converted with it are never early.
    """
    return store.mark_internal().timestamp() - time.time()


def claim_due(store: BeatStore, limit: int, lookahead: float = 0.0,
              group_start: datetime | None = None) -> list[dict[str, Any]]:
    """Lock up to ``limit`` schedules due now, or within ``lookahead`` s for one instant (SKIP LOCKED).

    With a lookahead the claim takes the rows of the earliest pending instant
    (``group_start``, else the earliest cursor) up to GROUP_WINDOW_SECONDS after
    it, plus every row already due; judged by the database clock.
    """
    store.mark_internal()
    return store.claim_due(limit, lookahead, group_start, GROUP_WINDOW_SECONDS)


def skip_overlapping(store: BeatStore, fires: list[Fire]) -> set[uuid.UUID]:
    """Just before commit: hold back fires whose previous run is live; returns their ids.

    overlap ``skip``: skipped. ``buffer_one``: the first waits as 'buffered' (published when the live run
    finishes: the worker hook or the sweep releases it), further ones are skipped.
    """
    held: set[uuid.UUID] = set()
    ids = [f.id for f in fires if f.overlap_skip]
    if ids:
        held |= store.skip_overlapping(ids)
    ids = [f.id for f in fires if f.overlap_policy == "buffer_one"]
    if ids:
        held |= store.buffer_overlapping(ids)
    return held


def cancel_overlapped(store: BeatStore, fires: list[Fire]) -> list[dict[str, Any]]:
    """Just before commit: for cancel_other fires, mark the schedule's earlier live runs revoked; returns
    [{id, terminate}] for the caller to revoke through Celery once the transaction commits."""
    ids = [f.id for f in fires if f.overlap_policy == "cancel_other"]
    return store.cancel_overlapped(ids) if ids else []


def revoke_replaced(app: Any, cancelled: list[dict[str, Any]]) -> None:
    """Once committed: revoke through Celery the runs cancel_overlapped marked revoked in the ledger."""
    for terminate in (False, True):
        ids = [str(c["id"]) for c in cancelled if bool(c["terminate"]) is terminate]
        if not ids:
            continue
        log.info("runledger: cancel_other revoking %d run(s)%s", len(ids), " (terminate)" if terminate else "")
        try:
            app.control.revoke(ids, terminate=terminate)
        except Exception as exc:  # the ledger already says revoked; the worker's guard stops unstarted runs
            log.warning("runledger: revoking %s failed: %s", ", ".join(ids), safe_error(exc))


def record_pass(store: BeatStore, batch_size: int, lookahead: float = 0.0, group_start: datetime | None = None,
                policy: FaultPolicy = FaultPolicy()) -> PassResult:
    """Claim a batch and record its fires in the caller's open transaction (no commit)."""
    offset = clock_offset(store)
    rows = store.claim_due(batch_size, lookahead, group_start, GROUP_WINDOW_SECONDS)
    result = record_claimed(store, rows, policy)
    result.clock_offset = offset
    return result


def run_pass(store: BeatStore, batch_size: int, policy: FaultPolicy = FaultPolicy(),
             at: datetime | None = None) -> PassResult:
    """One transaction: claim due schedules, record them, apply overlap skips, commit.

    With ``at`` the pass is judged as if the database clock read ``at`` (testing.run_due): every active schedule
    whose cursor is at or before it is claimed and planned with "now" = ``at``.
    """
    with store.conn.transaction():
        if at is None:
            result = record_pass(store, batch_size, 0.0, None, policy)
        else:
            store.mark_internal()
            result = record_claimed(store, store.claim_due_at(at, batch_size), policy)
        skipped = skip_overlapping(store, result.fires)
    if skipped:
        result.fires = [f for f in result.fires if f.id not in skipped]
        result.skipped += len(skipped)
    return result
