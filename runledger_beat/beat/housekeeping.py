"""Housekeeping between instants: the recovery sweep, the ledger's partitions, the beat's row, metrics.

Every few seconds the recovery sweep republishes ledger rows left pending past the grace (a crashed beat, a
failed publish); hourly the day partitions are made ahead (the drops past the retention run in a thread of their
own: retention.py); every second the beat's row in ``beats`` is refreshed. None of it waits on a lock (SKIP
LOCKED, try-locks, a 100 ms lock timeout on the DDL) and none runs while an instant is about to commit. What may
wait or scan more, marking lost and expired runs, releasing buffered fires, pruning the audit log and reading the
metrics gauges, runs in the upkeep thread on a connection of its own (upkeep.py).
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
from .upkeep import Upkeep

log = logging.getLogger(__name__)

#: Ledger rows the recovery sweep republishes per pass.
SWEEP_LIMIT = 1000
#: While another beat publishes a big instant, a recovery sweep takes only rows this many graces old.
BUSY_GRACE_FACTOR = 10
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
        self.upkeep = Upkeep(settings, connections.timeouts(), metrics,
                             broker_down=lambda: outbox.broker_backoff.active, released=self._released)
        self.beat_id = uuid.uuid4()  # this beat's row in the beats table
        self._host = socket.gethostname()
        self._beat_row = False       # whether the row was written (and so is removed at close)
        self._beats_table = True     # False once the table turned out to be missing (an unmigrated schema)
        self._next_sweep = 0.0
        self._next_partitions = 0.0
        self._next_beat_tick = 0.0

    def start(self) -> None:
        """Start the upkeep thread (once; beat's loop calls this every pass)."""
        self.upkeep.start()

    def sweep_soon(self) -> None:
        """Sweep the outbox at the next step (rows were queued to publish at once: backfill, manual trigger), and
        run the upkeep's sweep at once."""
        self._next_sweep = 0.0
        self.upkeep.soon()

    def _released(self) -> None:
        """The upkeep released buffered fires: the next step's sweep publishes them."""
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
        """Republish ledger rows left pending past the grace (a crashed beat, a failed publish, a released
        buffered fire); rows another beat sweeps are skipped, never waited for."""
        self._next_sweep = time.monotonic() + self.upkeep.sweep_every
        if self.outbox.broker_backoff.active:
            return
        ledger = self.connections.ledger
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
        """Mark the tick and the publish backlog (the gauges read from the database are the upkeep thread's)."""
        self.metrics.ticked()
        self.metrics.backlog(len(self.outbox.held) + len(self.outbox.backlog))

    def leave(self) -> None:
        """Remove this beat's row (clean shutdown)."""
        if self.connections.connected and self._beat_row:
            self.connections.ledger.beat_remove(self.beat_id)
            self._beat_row = False

    def close(self) -> None:
        """Stop the upkeep thread; wait a little for retention drops under way."""
        self.upkeep.close(RETENTION_JOIN_TIMEOUT)
        self.retention.join(RETENTION_JOIN_TIMEOUT)
