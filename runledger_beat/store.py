"""The one place that runs the named statements of sql/queries.sql.

``Store`` wraps one psycopg connection (dict rows, search_path on the runledger
schema: see db.connect) and offers a method per statement, named for what it
means. It never commits: the caller owns the transaction, because the fire
pipeline must decide exactly where a claim ends. Array parameters travel in
binary (``%(name)b`` in the SQL), which matters for batches of thousands.
The migration runner keeps its own statements in db.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

import psycopg
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from . import queries

#: NOTIFY channel that wakes every beat when schedules change (its name is in the listen_schedules statement).
NOTIFY_CHANNEL = "runledger_schedules"
#: Payload of a notification asking the beats to sweep the outbox now (store.notify_outbox).
OUTBOX_PAYLOAD = "outbox"
#: How long the ledger and the schedule audit log are kept unless told otherwise (30 days; runledger_retention).
DEFAULT_RETENTION_SECONDS = 30 * 86400.0


#: Days of ledger partitions kept created ahead of today (UTC).
LEDGER_DAYS_AHEAD = 7


class Store:
    """Named statements over one connection; see the module docstring."""

    def __init__(self, conn: psycopg.Connection, cursor_function: bool | None = None) -> None:
        self.conn = conn
        #: Whether cursors move through runledger_advance_cursors() (None: asked at the first move).
        self.cursor_function = cursor_function

    def _one(self, statement: str, params: dict[str, Any] | None = None) -> dict | None:
        return self.conn.execute(statement, params or {}).fetchone()

    def _all(self, statement: str, params: dict[str, Any] | None = None) -> list[dict]:
        return self.conn.execute(statement, params or {}).fetchall()

    # -- the beat: claim, record, advance ------------------------------------

    def mark_internal(self) -> datetime:
        """Keep this transaction's cursor moves from waking other beats; returns the database clock."""
        return self._one(queries.mark_internal)["db_clock"]

    def stretch_idle_timeout(self, seconds: float) -> None:
        """Let this transaction stay idle up to ``seconds`` (a lookahead stretched for a big instant)."""
        self._one(queries.stretch_idle_timeout, {"ms": str(int(seconds * 1000))})

    def try_prepare_lock(self) -> bool:
        """Whether this transaction may prepare an instant ahead (one beat per schema at a time)."""
        return bool(self._one(queries.try_prepare_lock)["ok"])

    def claim_due(self, limit: int, lookahead: float, group_start: datetime | None,
                  group_window: float) -> list[dict]:
        """Lock schedules due by the horizon (SKIP LOCKED), oldest cursor first."""
        return self._all(queries.claim_due_schedules, {
            "limit": limit, "lookahead": float(lookahead), "group_start": group_start,
            "group_window": group_window})

    def insert_fires(self, ids: Sequence[uuid.UUID], schedule_ids: Sequence[uuid.UUID],
                     scheduled_fors: Sequence[datetime], payloads: Sequence[str],
                     statuses: Sequence[str], notes: Sequence[str | None]) -> set[uuid.UUID]:
        """Record fires as ledger rows (payloads as JSON text); returns the ids inserted (a taken slot is not)."""
        rows = self._all(queries.insert_fires, {
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
            return self._one(queries.advance_cursors_as_beat, params)["moved"]
        return self.conn.execute(queries.advance_cursors, params).rowcount

    def cursor_function_state(self) -> dict[str, bool]:
        """{"present": runledger_advance_cursors() exists, "allowed": this role may call it}."""
        return self._one(queries.cursor_function)

    def existing_schedules(self, ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Which of these schedule ids still exist."""
        return {r["id"] for r in self._all(queries.existing_schedules, {"ids": list(ids)})}

    def record_schedule_fault(self, schedule_id: uuid.UUID, error: str, delay: float, max_delay: float,
                              quarantine_after: int) -> dict | None:
        """Count a schedule's failure (retry after a doubling delay, quarantine at ``quarantine_after``);
        returns {failures, retry_at, quarantined_at}, None if the schedule is gone."""
        return self._one(queries.record_schedule_fault, {
            "id": schedule_id, "error": error[:1000], "delay": float(delay), "max_delay": float(max_delay),
            "quarantine_after": int(quarantine_after)})

    def clear_schedule_faults(self, schedule_ids: Sequence[uuid.UUID]) -> None:
        """Forget the failures of schedules that fired or were resumed."""
        self.conn.execute(queries.clear_schedule_faults, {"ids": list(schedule_ids)})

    def quarantined_count(self) -> int:
        """How many schedules are quarantined."""
        return int(self._one(queries.quarantined_count)["n"])

    def skip_overlapping(self, fire_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """Mark skipped the fires whose schedule still has a live run; returns their ids."""
        return {r["id"] for r in self._all(queries.skip_overlapping_fires, {"ids": list(fire_ids)})}

    def seconds_until_due(self, lookahead: float) -> float | None:
        """Seconds until the earliest active cursor enters the lookahead window (None: nothing active)."""
        return self._one(queries.next_due_in, {"lookahead": float(lookahead)})["seconds"]

    def next_instant_size(self, cap: int, group_window: float) -> int:
        """Active schedules due at the earliest claimable instant, counted up to ``cap``."""
        return self._one(queries.next_instant_size, {"cap": int(cap), "group_window": float(group_window)})["n"]

    # -- the beat: the outbox ----------------------------------------------------

    def mark_sent(self, fire_ids: Sequence[uuid.UUID]) -> None:
        """Fires the broker confirmed."""
        self.conn.execute(queries.mark_sent, {"ids": list(fire_ids)})

    def mark_publish_failed(self, fire_ids: Sequence[uuid.UUID], error: str, max_attempts: int) -> list[uuid.UUID]:
        """Count a refused publish (pending for the sweep, failed at ``max_attempts``); returns dead-lettered ids."""
        rows = self._all(queries.mark_publish_failed,
                         {"ids": list(fire_ids), "error": error[:1000], "max_attempts": int(max_attempts)})
        return [r["id"] for r in rows if r["status"] == "failed"]

    def note_publish_outage(self, fire_ids: Sequence[uuid.UUID], error: str) -> None:
        """Keep why these fires wait (the broker is away); no attempt is counted."""
        self.conn.execute(queries.note_publish_outage, {"ids": list(fire_ids), "error": error[:1000]})

    def hold_publishing(self) -> bool:
        """Keep recovery sweeps off this schema's pending rows while a big instant is published (session lock)."""
        return bool(self._one(queries.hold_publishing)["held"])

    def release_publishing(self) -> None:
        """End hold_publishing."""
        self._one(queries.release_publishing)

    def sweep_lock(self) -> bool:
        """In a sweep's transaction: whether no beat is publishing a big instant now (see hold_publishing)."""
        return bool(self._one(queries.sweep_lock)["free"])

    def claim_pending(self, grace: float, limit: int) -> list[dict]:
        """Lock ledger rows left unpublished past the grace (manual triggers at once), for one sweeper."""
        return self._all(queries.claim_pending_jobs, {"grace": grace, "limit": limit})

    def read_spilled(self, fire_ids: Sequence[uuid.UUID], first: datetime, last: datetime) -> list[tuple]:
        """Committed fires still pending, by id, scheduled between ``first`` and ``last`` (see the pipeline), as
        tuples in ``Fire``'s field order: read back by the thousand, a row as a dict costs more than its fire."""
        with self.conn.cursor(row_factory=tuple_row) as cur:
            return cur.execute(queries.read_spilled, {"ids": list(fire_ids), "first": first, "last": last}).fetchall()

    def resolve_stale_sent(self, lost_after: float) -> list[dict]:
        """Sent fires past their expiry become expired, those never started (when a hooked worker runs) lost."""
        return self._all(queries.resolve_stale_sent, {"lost_after": float(lost_after)})

    def unresolved_sent_without_hook(self, older_than: float) -> int:
        """Sent fires older than ``older_than`` s nobody started, when no hooked worker reported within the hour."""
        return int(self._one(queries.unresolved_sent_without_hook, {"older_than": float(older_than)})["n"])

    def mark_lost_runs(self, default_bound: float) -> list[uuid.UUID]:
        """Started runs older than their time limit (else ``default_bound`` s) become lost; returns their ids."""
        return [r["id"] for r in self._all(queries.mark_lost_runs, {"default_bound": float(default_bound)})]

    # -- the worker hook ---------------------------------------------------------

    def start_run(self, job_id: str, task: str, worker: str | None, retries: int) -> bool:
        """Move a not-yet-started ledger row of ``task`` to started (the duplicate guard); False if it was not."""
        return self._one(queries.worker_claim_job,
                         {"id": job_id, "task": task, "worker": worker, "retries": retries}) is not None

    def worker_seen(self, hostname: str, pid: int) -> None:
        """A worker with the ledger hook reports itself."""
        self.conn.execute(queries.worker_seen, {"hostname": hostname, "pid": pid})

    def count_duplicate(self, job_id: str, task: str) -> str | None:
        """Count a delivery of a run already started or finished; its status, None when there is no row of ``task``."""
        row = self._one(queries.worker_count_duplicate, {"id": job_id, "task": task})
        return None if row is None else row["status"]

    def mark_retry(self, job_id: str, task: str, retries: int, error: str) -> None:
        """A run of ``task`` asked to retry."""
        self.conn.execute(queries.worker_mark_retry, {"id": job_id, "task": task, "retries": retries, "error": error})

    def mark_success(self, job_id: str, task: str) -> None:
        """A run of ``task`` finished successfully."""
        self.conn.execute(queries.worker_mark_success, {"id": job_id, "task": task})

    def mark_failure(self, job_id: str, task: str, error: str) -> None:
        """A run of ``task`` failed."""
        self.conn.execute(queries.worker_mark_failure, {"id": job_id, "task": task, "error": error})

    def mark_revoked(self, job_id: str, task: str, note: str | None) -> None:
        """A run of ``task`` was revoked or expired."""
        self.conn.execute(queries.worker_mark_revoked, {"id": job_id, "task": task, "error": note})

    # -- schedules (API, CLI, importer) --------------------------------------------

    def db_now(self) -> datetime:
        """The database clock, which judges due-ness."""
        return self._one(queries.api_db_now)["now"]

    def schedule(self, name: str, lock: bool = False) -> dict | None:
        """One schedule row by name (locked for a read-modify-write with ``lock``)."""
        return self._one(queries.api_lock_schedule if lock else queries.api_get_schedule, {"name": name})

    def insert_schedule(self, row: dict[str, Any]) -> dict:
        """Create a schedule from full column values; returns the stored row."""
        return self._one(queries.api_insert_schedule, _json_columns(row))

    def update_schedule(self, row: dict[str, Any]) -> dict:
        """Replace a schedule's definition and cursor (by id); returns the stored row."""
        return self._one(queries.api_update_schedule, _json_columns(row))

    def schedules(self, task: str | None = None, organization_id: str | None = None,
                  active: bool | None = None) -> list[dict]:
        """Schedules by name, optionally filtered."""
        return self._all(queries.api_list_schedules,
                         {"task": task, "organization_id": organization_id, "active": active})

    def set_active(self, schedule_id: uuid.UUID, active: bool, next_fire_at: datetime | None) -> dict:
        """Pause or resume a schedule with its new cursor; returns the row."""
        return self._one(queries.api_set_active, {"id": schedule_id, "active": active, "next_fire_at": next_fire_at})

    def delete_schedule(self, name: str) -> bool:
        """Remove a schedule (its ledger rows stay); False when there was none."""
        return self._one(queries.api_delete_schedule, {"name": name}) is not None

    def insert_manual_job(self, job: dict[str, Any]) -> dict:
        """Record a manual trigger as a pending ledger row; returns it."""
        return self._one(queries.api_insert_manual_job,
                         dict(job, payload=Jsonb(job["payload"]), options=Jsonb(job["options"] or {})))

    def listen(self) -> None:
        """Subscribe this (autocommit) connection to the schedules channel."""
        self.conn.execute(queries.listen_schedules)

    def notify_schedules(self) -> None:
        """Wake the running beats."""
        self.conn.execute(queries.api_notify_schedules)

    def history(self, name: str, status: str | None, limit: int) -> list[dict]:
        """The latest ledger rows of a schedule, newest first."""
        return self._all(queries.api_history, {"name": name, "status": status, "limit": limit})

    def config_schedules(self) -> list[dict]:
        """Every schedule imported from a Celery beat_schedule."""
        return self._all(queries.api_config_schedules)

    def deactivate_config(self, schedule_ids: Sequence[uuid.UUID]) -> list[str]:
        """Deactivate config schedules whose entry left the beat_schedule; returns their names."""
        return [r["name"] for r in self._all(queries.api_deactivate_config, {"ids": list(schedule_ids)})]

    # -- schedule features (overlap, backfill, notes, audit, calendars) ------------------

    def pause_schedule(self, schedule_id: uuid.UUID, note: str | None) -> dict:
        """Pause a schedule, recording the note, when and who (role, application_name); returns the row."""
        return self._one(queries.feature_pause_schedule, {"id": schedule_id, "note": note})

    def clear_pause(self, schedule_id: uuid.UUID) -> dict | None:
        """Forget a schedule's pause note; returns the row, or None when it had none."""
        return self._one(queries.feature_clear_pause, {"id": schedule_id})

    def audit(self, name: str | None, since_seconds: float | None, limit: int = 10000) -> list[dict]:
        """Audit log entries (oldest first), optionally of one schedule and within a recent window."""
        return self._all(queries.feature_audit, {"name": name, "since": since_seconds, "limit": limit})

    def prune_audit(self, older_than_seconds: float = DEFAULT_RETENTION_SECONDS) -> int:
        """Delete audit entries older than the retention (default 30 days); returns how many."""
        return self.conn.execute(queries.feature_prune_audit, {"older_than": float(older_than_seconds)}).rowcount

    def insert_backfill(self, schedule_id: uuid.UUID, ids: Sequence[uuid.UUID], scheduled_fors: Sequence[datetime],
                        payloads: Sequence[str]) -> list[dict]:
        """Record backfill slots as pending ledger rows (payloads as JSON text); returns {id, scheduled_for}
        of the rows inserted (a slot already recorded is not)."""
        return self._all(queries.feature_insert_backfill, {
            "schedule_id": schedule_id, "ids": list(ids), "scheduled_fors": list(scheduled_fors),
            "payloads": list(payloads)})

    def notify_outbox(self) -> None:
        """Wake the running beats and have them sweep for pending rows to publish at once (at commit)."""
        self.conn.execute(queries.feature_notify_outbox)

    def add_calendar(self, name: str, dates: Sequence[date]) -> dict:
        """Create a calendar or add dates to it; returns it."""
        return self._one(queries.feature_calendar_add, {"name": name, "dates": sorted(dates)})

    def calendar(self, name: str) -> dict | None:
        """One calendar, or None."""
        return self._one(queries.feature_calendar_get, {"name": name})

    def calendars(self) -> list[dict]:
        """Every calendar with the names of the schedules using it."""
        return self._all(queries.feature_calendar_list)

    def calendar_users(self, name: str) -> list[str]:
        """Names of the schedules using a calendar."""
        return [r["name"] for r in self._all(queries.feature_calendar_users, {"name": name})]

    def delete_calendar(self, name: str) -> bool:
        """Remove a calendar no schedule uses; False when there was none."""
        return self._one(queries.feature_calendar_delete, {"name": name}) is not None

    def buffer_overlapping(self, fire_ids: Sequence[uuid.UUID]) -> set[uuid.UUID]:
        """buffer_one fires: while a run is live the first waits ('buffered'), further ones are skipped;
        returns the ids held back."""
        return {r["id"] for r in self._all(queries.overlap_buffer_fires, {"ids": list(fire_ids)})}

    def release_buffered(self, finished_job_id: str | None = None, limit: int = 1000,
                         task: str | None = None) -> list[dict]:
        """Buffered fires whose schedule has no live run become pending (released); returns them to publish.
        With ``finished_job_id`` only the schedule of that run of ``task``."""
        return self._all(queries.overlap_release_buffered, {"job_id": finished_job_id, "task": task, "limit": limit})

    def cancel_overlapped(self, fire_ids: Sequence[uuid.UUID]) -> list[dict]:
        """cancel_other fires: mark revoked the earlier live runs of their schedules; returns {id, terminate}."""
        return self._all(queries.overlap_cancel_runs, {"ids": list(fire_ids)})

    # -- reading the ledger ----------------------------------------------------------

    def job_stats(self, name: str | None, since_seconds: float | None) -> list[dict]:
        """Per schedule: counts by status and lag percentiles."""
        return self._all(queries.job_stats, {"name": name, "since": since_seconds})

    # -- operations (beats, metrics, health) ------------------------------------------

    def maintain_ledger(self, retention_seconds: float | None, days_ahead: int = LEDGER_DAYS_AHEAD) -> list[dict]:
        """Create day partitions ahead, drop those past the retention (None: keep all); returns what it did
        as {action, partition_name} rows (none when another caller holds the ledger's maintenance lock)."""
        return self._all(queries.maintain_ledger, {"retention": retention_seconds, "days_ahead": days_ahead})

    def ledger_partitions(self) -> list[dict]:
        """The ledger's partitions (name, holds, rows_estimate, bytes), oldest first, the default last."""
        return self._all(queries.ledger_partitions)

    def beat_tick(self, beat_id: uuid.UUID, host: str, pid: int, version: str, preparing: bool,
                  stale_after: float) -> None:
        """Upsert this beat's row (stamped by the database clock); prune beats silent for ``stale_after`` s."""
        self.conn.execute(queries.beat_tick, {"id": beat_id, "host": host, "pid": pid, "version": version,
                                              "preparing": preparing, "stale": float(stale_after)})

    def beat_remove(self, beat_id: uuid.UUID) -> None:
        """Drop this beat's row (clean shutdown)."""
        self.conn.execute(queries.beat_remove, {"id": beat_id})

    def beats(self) -> list[dict]:
        """Every beat's row with ``age_seconds`` since its last tick, freshest first."""
        return self._all(queries.beats_list)

    def freshest_beat(self, host: str | None = None) -> dict:
        """{"beats": how many rows (of ``host`` only, when given), "age_seconds": since the freshest tick,
        None when there is none}."""
        return self._one(queries.beats_freshest, {"host": host})

    def operation_gauges(self) -> dict[str, int]:
        """{"due", "pending", "quarantined"}: schedules due now, unpublished ledger rows, quarantined schedules."""
        row = self._one(queries.metrics_gauges)
        return {"due": int(row["due"]), "pending": int(row["pending"]), "quarantined": int(row["quarantined"])}

    def last_fires(self) -> dict[uuid.UUID, dict]:
        """{schedule id: its latest ledger row's status, stage, scheduled_for, sent_at, lag_seconds}."""
        return {r["schedule_id"]: r for r in self._all(queries.web_last_fires)}

    def lag_series(self, schedule_id: Any, limit: int) -> list[dict]:
        """scheduled_for and lag_seconds (sent_at - scheduled_for) of a schedule's last ``limit`` sent fires,
        oldest first."""
        return self._all(queries.web_lag_series, {"id": schedule_id, "limit": int(limit)})

    def faulted_schedules(self) -> list[dict]:
        """Schedules with a fault record (failures, last_error, retry_at, quarantined_at), quarantined first."""
        return self._all(queries.web_faulted_schedules)

    def failed_jobs(self, limit: int) -> list[dict]:
        """The newest ``limit`` ledger rows with status failed, lost or expired."""
        return self._all(queries.web_failed_jobs, {"limit": int(limit)})

    def claim_due_at(self, at: datetime, limit: int) -> list[dict]:
        """Lock schedules due by ``at`` with ``db_now`` = ``at`` (testing.run_due: a pass at a chosen clock)."""
        return self._all(queries.testing_claim_due_at, {"at": at, "limit": limit})

    def slot_jobs(self, schedule_ids: Sequence[uuid.UUID], scheduled_fors: Sequence[datetime]) -> list[dict]:
        """The fires' ledger rows of these (schedule id, slot) pairs, in slot order."""
        return self._all(queries.testing_jobs, {"schedule_ids": list(schedule_ids),
                                                "scheduled_fors": list(scheduled_fors)})

    def doctor_schema(self, schema: str) -> dict:
        """{"present", "usage", "migrations_table"} of ``schema`` for this role."""
        return self._one(queries.doctor_schema, {"schema": schema})

    def applied_migrations(self) -> list[int]:
        """Versions recorded in schema_migrations."""
        return [r["version"] for r in self._all(queries.applied_migrations)]

    def table_privileges(self, schema: str, tables: Sequence[str]) -> list[dict]:
        """Per table: present, can_select, can_insert, can_update, can_delete (None when absent)."""
        return self._all(queries.doctor_privileges, {"schema": schema, "tables": list(tables)})

    def function_privileges(self, schema: str, signatures: Sequence[str]) -> list[dict]:
        """Per function signature: present, can_execute (None when absent)."""
        return self._all(queries.doctor_functions, {"schema": schema, "signatures": list(signatures)})

    def db_clock(self) -> datetime:
        """The database's clock_timestamp()."""
        return self._one(queries.doctor_clock)["now"]

    def listen_round_trip(self, timeout: float) -> bool:
        """LISTEN, NOTIFY ourselves, and whether the notification arrived within ``timeout`` s (autocommit)."""
        token = uuid.uuid4().hex
        self.conn.execute(queries.doctor_listen)
        try:
            self.conn.execute(queries.doctor_notify, {"token": token})
            return any(n.payload == token for n in self.conn.notifies(timeout=timeout, stop_after=1))
        finally:
            self.conn.execute(queries.doctor_unlisten)

    def recent_start(self) -> datetime | None:
        """The latest started_at within the last hour (a worker hook at work), else None."""
        return self._one(queries.doctor_recent_start)["started_at"]

    # -- the demo --------------------------------------------------------------------

    def demo_setup(self, schedules: Sequence[tuple[str, str, int]]) -> None:
        """Create the demo's runs table and its (name, cron, max jitter) schedules."""
        self.conn.execute(queries.demo_create_runs_table)
        for name, cron, jitter in schedules:
            self.conn.execute(queries.demo_insert_schedule, {
                "id": uuid.uuid4(), "name": name, "template": Jsonb({"args": [name], "kwargs": {}}),
                "cron": cron, "jitter": jitter})

    def demo_record_run(self, task_id: str, who: str, scheduled_for: str | None, worker: str) -> None:
        """The demo task ran."""
        self.conn.execute(queries.demo_record_run,
                          {"task_id": task_id, "who": who, "scheduled_for": scheduled_for, "worker": worker})

    def demo_progress(self) -> list[dict]:
        """Every fire with its sent and run times."""
        return self._all(queries.demo_progress)

    def demo_unfinished(self) -> int:
        """Fires sent but not yet run."""
        return int(self._one(queries.demo_unfinished)["n"])

    def demo_summary(self) -> list[dict]:
        """Per schedule: fires, sent, executed, slots."""
        return self._all(queries.demo_summary)


def _json_columns(row: dict[str, Any]) -> dict[str, Any]:
    """Column values with the jsonb columns wrapped for psycopg."""
    out = dict(row)
    out["payload_template"] = Jsonb(row["payload_template"])
    out["options"] = Jsonb(row["options"] or {})
    return out
