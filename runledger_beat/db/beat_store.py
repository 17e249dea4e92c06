"""What a beat runs: claim, record and advance, the outbox, sweeps and housekeeping (sql/beat.sql)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg.rows import tuple_row

from .store import Store

#: Days of ledger partitions kept created ahead of today (UTC).
LEDGER_DAYS_AHEAD = 7


class BeatStore(Store):
    """What a beat runs."""

    def __init__(self, conn: psycopg.Connection, cursor_function: bool | None = None) -> None:
        super().__init__(conn)
        #: Whether cursors move through runledger_advance_cursors() (None: asked at the first move).
        self.cursor_function = cursor_function

    def mark_internal(self) -> datetime:
        """Keep this transaction's cursor moves from waking other beats; returns the database clock."""
        return self._one(self.q.mark_internal)["db_clock"]

    def set_local_timeouts(self, statement: float, lock: float, idle: float) -> None:
        """This transaction's statement, lock and idle-in-transaction timeouts (seconds; pool mode "transaction",
        where the connection has none of its own)."""
        self._one(self.q.set_local_timeouts, {"statement": str(int(statement * 1000)), "lock": str(int(lock * 1000)),
                                              "idle": str(int(idle * 1000))})

    def stretch_idle_timeout(self, seconds: float) -> None:
        """Let this transaction stay idle up to ``seconds`` (a lookahead stretched for a big instant)."""
        self._one(self.q.stretch_idle_timeout, {"ms": str(int(seconds * 1000))})

    def try_prepare_lock(self) -> bool:
        """Whether this transaction may prepare an instant ahead (one beat per schema at a time)."""
        return bool(self._one(self.q.try_prepare_lock)["ok"])

    def claim_due(self, limit: int, lookahead: float, group_start: datetime | None,
                  group_window: float) -> list[dict]:
        """Lock schedules due by the horizon (SKIP LOCKED), oldest cursor first."""
        return self._all(self.q.claim_due_schedules, {
            "limit": limit, "lookahead": float(lookahead), "group_start": group_start,
            "group_window": group_window})

    def insert_fires(self, ids: Sequence[uuid.UUID], schedule_ids: Sequence[uuid.UUID],
                     scheduled_fors: Sequence[datetime], payloads: Sequence[str],
                     statuses: Sequence[str], notes: Sequence[str | None]) -> set[uuid.UUID]:
        """Record fires as ledger rows (payloads as JSON text); returns the ids inserted (a taken slot is not)."""
        rows = self._all(self.q.insert_fires, {
            "ids": list(ids), "schedule_ids": list(schedule_ids), "scheduled_fors": list(scheduled_fors),
            "payloads": list(payloads), "statuses": list(statuses), "notes": list(notes)})
        return {r["id"] for r in rows}

    def advance_cursors(self, ids: Sequence[uuid.UUID], next_fire_ats: Sequence[datetime | None],
                        fired: Sequence[bool]) -> int:
        """Move claimed schedules' cursors (None deactivates); returns how many rows moved. Through
        runledger_advance_cursors() when this role may call it (kept out of the audit log), else a plain UPDATE."""
        if self.cursor_function is None:
            self.cursor_function = self.cursor_function_state()["allowed"]
        params = {"ids": list(ids), "next_fire_ats": list(next_fire_ats), "fired": list(fired)}
        if self.cursor_function:
            return self._one(self.q.advance_cursors_as_beat, params)["moved"]
        return self.conn.execute(self.q.advance_cursors, params).rowcount

    def cursor_function_state(self) -> dict[str, bool]:
        """{"present": runledger_advance_cursors() exists, "allowed": this role may call it}."""
        return self._one(self.q.cursor_function)

    def existing_schedules(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these schedule ids still exist."""
        return {r["id"] for r in self._all(self.q.existing_schedules, {"ids": list(ids)})}

    def record_schedule_fault(self, schedule_id: uuid.UUID, error: str, delay: float, max_delay: float,
                              quarantine_after: int) -> dict | None:
        """Count a schedule's failure (retry after a doubling delay, quarantine at ``quarantine_after``);
        returns {failures, retry_at, quarantined_at}, None if the schedule is gone."""
        return self._one(self.q.record_schedule_fault, {
            "id": schedule_id, "error": error[:1000], "delay": float(delay), "max_delay": float(max_delay),
            "quarantine_after": int(quarantine_after)})

    def clear_schedule_faults(self, schedule_ids: Sequence[uuid.UUID]) -> None:
        """Forget the failures of schedules that fired or were resumed."""
        self.conn.execute(self.q.clear_schedule_faults, {"ids": list(schedule_ids)})

    def skip_overlapping(self, fire_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Mark skipped the fires whose schedule still has a live run; returns their ids."""
        return {r["id"] for r in self._all(self.q.skip_overlapping_fires, {"ids": list(fire_ids)})}

    def buffer_overlapping(self, fire_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """buffer_one fires: while a run is live the first waits ('buffered'), further ones are skipped;
        returns the ids held back."""
        return {r["id"] for r in self._all(self.q.overlap_buffer_fires, {"ids": list(fire_ids)})}

    def cancel_overlapped(self, fire_ids: Sequence[uuid.UUID]) -> list[dict]:
        """cancel_other fires: mark revoked the earlier live runs of their schedules; returns {id, terminate}."""
        return self._all(self.q.overlap_cancel_runs, {"ids": list(fire_ids)})

    def seconds_until_due(self, lookahead: float) -> float | None:
        """Seconds until the earliest active cursor enters the lookahead window (None: nothing active)."""
        return self._one(self.q.next_due_in, {"lookahead": float(lookahead)})["seconds"]

    def next_instant_size(self, cap: int, group_window: float) -> int:
        """Active schedules due at the earliest claimable instant, counted up to ``cap``."""
        return self._one(self.q.next_instant_size, {"cap": int(cap), "group_window": float(group_window)})["n"]

    def mark_sent(self, fire_ids: Sequence[uuid.UUID]) -> None:
        """Fires the broker confirmed."""
        self.conn.execute(self.q.mark_sent, {"ids": list(fire_ids)})

    def mark_publish_failed(self, fire_ids: Sequence[uuid.UUID], error: str, max_attempts: int) -> list[uuid.UUID]:
        """Count a refused publish (pending for the sweep, failed at ``max_attempts``); returns dead-lettered ids."""
        rows = self._all(self.q.mark_publish_failed,
                         {"ids": list(fire_ids), "error": error[:1000], "max_attempts": int(max_attempts)})
        return [r["id"] for r in rows if r["status"] == "failed"]

    def note_publish_outage(self, fire_ids: Sequence[uuid.UUID], error: str) -> None:
        """Keep why these fires wait (the broker is away); no attempt is counted."""
        self.conn.execute(self.q.note_publish_outage, {"ids": list(fire_ids), "error": error[:1000]})

    def claim_backlog(self, fire_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """In a transaction: lock those of these fires still pending and unlocked (no other beat republishes
        them meanwhile); returns their ids."""
        return {r["id"] for r in self._all(self.q.claim_backlog, {"ids": list(fire_ids)})}

    def hold_publishing(self) -> bool:
        """Keep recovery sweeps off this schema's pending rows while a big instant is published (session lock)."""
        return bool(self._one(self.q.hold_publishing)["held"])

    def release_publishing(self) -> None:
        """End hold_publishing."""
        self._one(self.q.release_publishing)

    def sweep_lock(self) -> bool:
        """In a sweep's transaction: whether no beat is publishing a big instant now (see hold_publishing)."""
        return bool(self._one(self.q.sweep_lock)["free"])

    def claim_pending(self, grace: float, limit: int) -> list[dict]:
        """Lock ledger rows left unpublished past the grace (manual triggers at once), for one sweeper."""
        return self._all(self.q.claim_pending_jobs, {"grace": grace, "limit": limit})

    def read_kept_by_id(self, fire_ids: Sequence[uuid.UUID], first: datetime, last: datetime) -> list[tuple]:
        """Committed fires still pending, by id, scheduled between ``first`` and ``last`` (see the pipeline), as
        tuples in ``Fire``'s field order: read back by the thousand, a row as a dict costs more than its fire."""
        with self.conn.cursor(row_factory=tuple_row) as cur:
            params = {"ids": list(fire_ids), "first": first, "last": last}
            return cur.execute(self.q.read_kept_by_id, params).fetchall()

    def resolve_stale_sent(self, lost_after: float) -> list[dict]:
        """Sent fires past their expiry become expired, those never started (when a hooked worker runs) lost."""
        return self._all(self.q.resolve_stale_sent, {"lost_after": float(lost_after)})

    def unresolved_sent_without_hook(self, older_than: float) -> int:
        """Sent fires older than ``older_than`` s nobody started, when no hooked worker reported within the hour."""
        return int(self._one(self.q.unresolved_sent_without_hook, {"older_than": float(older_than)})["n"])

    def mark_lost_runs(self, default_bound: float) -> list[uuid.UUID]:
        """Started runs older than their time limit (else ``default_bound`` s) become lost; returns their ids."""
        return [r["id"] for r in self._all(self.q.mark_lost_runs, {"default_bound": float(default_bound)})]

    def release_buffered(self, limit: int = 1000) -> list[dict]:
        """Buffered fires whose schedule has no live run become pending (released); returns them to publish."""
        return self._all(self.q.overlap_release_buffered, {"job_id": None, "task": None, "limit": limit})

    def listen(self) -> None:
        """Subscribe this (autocommit) connection to the schedules channel."""
        self.conn.execute(self.q.listen_schedules)

    def prune_audit(self, older_than_seconds: float) -> int:
        """Delete audit entries older than the retention; returns how many."""
        return self.conn.execute(self.q.feature_prune_audit, {"older_than": float(older_than_seconds)}).rowcount

    def maintain_ledger(self, retention_seconds: float | None, days_ahead: int = LEDGER_DAYS_AHEAD) -> list[dict]:
        """Create day partitions ahead, drop those past the retention (None: keep all); returns what it did
        as {action, partition_name} rows (none when another caller holds the ledger's maintenance lock)."""
        return self._all(self.q.maintain_ledger, {"retention": retention_seconds, "days_ahead": days_ahead})

    def beat_tick(self, beat_id: uuid.UUID, host: str, pid: int, version: str, preparing: bool,
                  stale_after: float) -> None:
        """Upsert this beat's row (stamped by the database clock); prune beats silent for ``stale_after`` s."""
        self.conn.execute(self.q.beat_tick, {"id": beat_id, "host": host, "pid": pid, "version": version,
                                              "preparing": preparing, "stale": float(stale_after)})

    def beat_remove(self, beat_id: uuid.UUID) -> None:
        """Drop this beat's row (clean shutdown)."""
        self.conn.execute(self.q.beat_remove, {"id": beat_id})

    def operation_gauges(self) -> dict[str, int]:
        """{"due", "pending", "quarantined"}: schedules due now, unpublished ledger rows, quarantined schedules."""
        row = self._one(self.q.metrics_gauges)
        return {"due": int(row["due"]), "pending": int(row["pending"]), "quarantined": int(row["quarantined"])}

    def claim_due_at(self, at: datetime, limit: int) -> list[dict]:
        """Lock schedules due by ``at`` with ``db_now`` = ``at`` (testing.run_due: a pass at a chosen clock)."""
        return self._all(self.q.testing_claim_due_at, {"at": at, "limit": limit})

    def slot_jobs(self, schedule_ids: Sequence[uuid.UUID], scheduled_fors: Sequence[datetime]) -> list[dict]:
        """The fires' ledger rows of these (schedule id, slot) pairs, in slot order."""
        return self._all(self.q.testing_jobs, {"schedule_ids": list(schedule_ids),
                                                "scheduled_fors": list(scheduled_fors)})
