"""Housekeeping between instants: the recovery sweep, the ledger's partitions, pruning, the beat's row, metrics.

Every few seconds the sweep republishes ledger rows left pending past the grace (a crashed beat, a failed
publish), marks lost and expired runs and releases buffered fires; hourly the audit log is pruned and the day
partitions made ahead (the drops past the retention run in a thread of their own: retention.py); every second
the beat's row in ``beats`` is refreshed, every few seconds the metrics gauges. None of it runs while an instant
is about to commit.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

import psycopg

from ..db.redaction import safe_error
from ..publish.fires import Fire, Outgoing
from ..settings import Settings
from ..version import __version__
from . import metrics as metrics_module
from .connections import BeatConnections
from .outbox import Outbox
from .retention import LEDGER_EVERY, LEDGER_RETRY, RetentionDrops, log_partitions

log = logging.getLogger(__name__)

#: Ledger rows the recovery sweep republishes per pass.
SWEEP_LIMIT = 1000
#: While another beat publishes a big instant, a recovery sweep takes only rows this many graces old.
BUSY_GRACE_FACTOR = 10
#: Seconds between prunings of the audit log (entries older than runledger_retention go).
PRUNE_EVERY = 3600.0
#: How long a fire may stay sent with no worker hook seen before beat warns, and how often it warns.
HOOK_WARNING_AFTER = 600.0
HOOK_WARNING_EVERY = 3600.0
#: A beat's row in the beats table is refreshed at most this often (seconds).
BEAT_TICK_EVERY = 1.0
#: Rows of beats silent this long (seconds) are pruned by any beat.
BEAT_STALE_AFTER = 3600.0
#: Seconds shutdown waits for retention drops under way (their thread is a daemon: it ends with beat).
RETENTION_JOIN_TIMEOUT = 5.0


class Housekeeping:
    """The bookkeeping of one beat, each step on its own schedule; see the module docstring."""

    def __init__(self, settings: Settings, connections: BeatConnections, outbox: Outbox,
                 metrics: metrics_module.NoMetrics, preparing: Callable[[], bool]) -> None:
        self.settings = settings
        self.connections = connections
        self.outbox = outbox
        self.metrics = metrics
        self.preparing = preparing   # whether this beat holds an instant prepared (shown in its row)
        self.retention = RetentionDrops(settings, connections.timeouts())
        self.beat_id = uuid.uuid4()  # this beat's row in the beats table
        self._host = socket.gethostname()
        self._beat_row = False       # whether the row was written (and so is removed at close)
        self._beats_table = True     # False once the table turned out to be missing (an unmigrated schema)
        self._next_sweep = 0.0
        self._next_prune = 0.0
        self._next_partitions = 0.0
        self._next_hook_warning = 0.0
        self._next_beat_tick = 0.0
        self._next_gauges = 0.0

    def sweep_soon(self) -> None:
        """Sweep the outbox at the next step (rows were queued to publish at once: backfill, manual trigger)."""
        self._next_sweep = 0.0

    def sweep_due(self) -> bool:
        """Whether the recovery sweep is due."""
        return time.monotonic() >= self._next_sweep

    def partitions_due(self) -> bool:
        """Whether the day partitions ahead are due to be made."""
        return time.monotonic() >= self._next_partitions

    def wait_for_retention(self, timeout: float | None = None) -> None:
        """Wait for retention drops under way (at most ``timeout`` s)."""
        self.retention.join(timeout)

    def sweep(self) -> None:
        """Republish ledger rows left pending past the grace (a crashed beat, a failed publish); mark lost runs."""
        self._next_sweep = time.monotonic() + max(1.0, min(self.settings.recovery_grace / 2, 10.0))
        ledger = self.connections.ledger
        if time.monotonic() >= self._next_prune:
            self._prune_audit()
        lost = ledger.mark_lost_runs(self.settings.lost_after)
        if lost:
            log.warning("runledger: marked %d run(s) lost (started, never finished)", len(lost))
        resolved = ledger.resolve_stale_sent(self.settings.lost_after)
        if resolved:
            expired = sum(1 for r in resolved if r["status"] == "expired")
            log.warning("runledger: %d sent fire(s) expired before a worker took them, %d never started (lost)",
                        expired, len(resolved) - expired)
        self._warn_without_hook()
        if self.outbox.broker_backoff.active:
            return
        released = ledger.release_buffered()  # buffer_one fires whose live run ended unseen by a worker hook
        if released:
            log.info("runledger: released %d buffered fire(s)", len(released))
        waiting = self.outbox.waiting()
        with ledger.conn.transaction():
            grace = self.settings.recovery_grace
            if not ledger.sweep_lock():  # a beat is publishing a big instant: its rows are not abandoned
                grace *= BUSY_GRACE_FACTOR
            rows = ledger.claim_pending(grace, SWEEP_LIMIT)
            fires = [Fire.from_job(r) for r in rows if r["id"] not in waiting]
            if fires:
                log.info("runledger: recovery sweep republishing %d fire(s)", len(fires))
                self.outbox.publish([Outgoing(f) for f in fires])

    def _prune_audit(self) -> None:
        """Drop audit entries past runledger_retention (the ledger's), hourly; a role without the right to only
        logs it."""
        self._next_prune = time.monotonic() + PRUNE_EVERY
        if self.settings.retention is None:
            return
        try:
            self.connections.ledger.prune_audit(self.settings.retention)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("runledger: cannot prune %s.schedule_changes (%s); grant DELETE on it to beat's role",
                        self.settings.schema, safe_error(exc))

    def make_partitions(self) -> None:
        """Day partitions made ahead: at start, then hourly, a minute on when a lock was busy; only between
        instants (a prepared transaction's locks would make the DDL wait). Days past runledger_retention are
        dropped by ``self.retention`` in the background."""
        self._next_partitions = time.monotonic() + LEDGER_EVERY
        try:
            done = self.connections.ledger.maintain_ledger(None)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("runledger: cannot maintain the ledger's partitions (%s); grant EXECUTE ON FUNCTION "
                        "%s.runledger_maintain_ledger(interval, integer) to beat's role (see `runledger-beat grants "
                        "beat`)", safe_error(exc), self.settings.schema)
            return
        if log_partitions(done, LEDGER_RETRY):
            self._next_partitions = time.monotonic() + LEDGER_RETRY

    def _warn_without_hook(self) -> None:
        """Warn (hourly) when sent fires stay unstarted and no worker runs the ledger hook."""
        if time.monotonic() < self._next_hook_warning:
            return
        self._next_hook_warning = time.monotonic() + HOOK_WARNING_EVERY
        waiting = self.connections.ledger.unresolved_sent_without_hook(HOOK_WARNING_AFTER)
        if waiting:
            log.warning("runledger: %d fire(s) were sent over %.0f s ago and no worker has reported the ledger hook "
                        "within the hour; add runledger_beat.install(app) to the workers' Celery app so the ledger "
                        "follows runs (until then their status stays 'sent')", waiting, HOOK_WARNING_AFTER)

    def beat_tick(self) -> None:
        """Refresh this beat's row (at most once per BEAT_TICK_EVERY, on the autocommit ledger connection,
        after the fires are settled, so it never delays a commit); prune beats silent for an hour."""
        now = time.monotonic()
        if now < self._next_beat_tick or not self._beats_table:
            return
        self._next_beat_tick = now + BEAT_TICK_EVERY
        try:
            self.connections.ledger.beat_tick(self.beat_id, self._host, os.getpid(), __version__,
                                              self.preparing(), BEAT_STALE_AFTER)
            self._beat_row = True
        except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege) as exc:
            self._beats_table = False  # never let bookkeeping stop the scheduling
            log.warning("runledger: cannot keep this beat's row in %s.beats (%s; run `runledger-beat migrate` or "
                        "`runledger-beat doctor`); it stays invisible to `beats` and `health`",
                        self.settings.schema, safe_error(exc))

    def refresh_metrics(self) -> None:
        """Mark the tick; every GAUGE_REFRESH seconds read the gauges (one statement, ledger connection)."""
        self.metrics.ticked()
        now = time.monotonic()
        if now >= self._next_gauges:
            self._next_gauges = now + metrics_module.GAUGE_REFRESH
            try:
                self.metrics.gauges(**self.connections.ledger.operation_gauges())
            except psycopg.OperationalError:
                raise  # the connection is gone: the loop starts afresh
            except psycopg.Error as exc:  # a refused statement (privileges, say): the gauges go stale, no more
                log.warning("runledger: reading the metrics gauges failed: %s", safe_error(exc))

    def leave(self) -> None:
        """Remove this beat's row (clean shutdown)."""
        if self.connections.connected and self._beat_row:
            self.connections.ledger.beat_remove(self.beat_id)
            self._beat_row = False

    def close(self) -> None:
        """Wait a little for retention drops under way."""
        self.retention.join(RETENTION_JOIN_TIMEOUT)
