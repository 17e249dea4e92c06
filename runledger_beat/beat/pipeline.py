"""The fire pipeline: the loop that ties a beat's parts together.

One ``run_once()`` does every due step and returns the seconds until there is work again:

1. publish what waits in memory (fires held for their instant, fires a broker outage stopped);
2. at a prepared instant, commit and publish it (outbox.py);
3. between instants, make the ledger's day partitions ahead (housekeeping.py);
4. claim and record the schedules due now, or within the lookahead for the next instant, in a transaction
   kept open until that instant (preparing.py);
5. settle what the broker confirmed; sweep for abandoned rows and refresh the beat's row (housekeeping.py),
   unless an instant is about to commit.

What may wait on a lock or scan the ledger (lost and expired runs, buffered fires, audit pruning, the metrics
gauges) runs in the upkeep thread on a connection of its own (upkeep.py), never in this loop.

Nothing is published before its instant, nor before the transaction that recorded it commits. If beat dies with
an instant prepared, the transaction rolls back and the fires are claimed again. The pipeline knows nothing of
``celery beat``: beat/scheduler.py drives it, tests drive it directly. ``after_commit`` and ``after_publish``
are empty hooks for subclasses (the test suite's crash points).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg

from ..backoff import Backoff
from ..db.redaction import safe_error
from ..publish.dispatcher import Dispatcher
from ..settings import Settings
from . import metrics as metrics_module
from .connections import BeatConnections, DatabaseClock
from .housekeeping import Housekeeping
from .instant import Prepared
from .outbox import Outbox
from .preparing import Preparer

log = logging.getLogger(__name__)

#: Waking a hair after an instant avoids a spin when clocks round down. Nothing is early without it: the clock
#: offset errs late by the claim's return trip (claim.clock_offset).
WAKE_MARGIN = 0.0005
#: How soon to look again when due rows are locked by another beat.
CONTENDED_RETRY = 0.05
#: Seconds between looks while the retention drops hold preparing back (a run with nothing to drop takes ~20 ms).
RETENTION_POLL = 0.05
#: Seconds shutdown waits for the broker's next confirm (the recovery sweep covers those never confirmed).
SHUTDOWN_CONFIRM_TIMEOUT = 2.0


class FirePipeline:
    """Claims, records, commits and publishes the fires of one beat; see the module docstring."""

    def __init__(self, app: Any, settings: Settings, max_wait: float = 5.0,
                 metrics: metrics_module.NoMetrics | None = None) -> None:
        self.app = app
        self.settings = settings
        self.max_wait = max_wait
        self.metrics = metrics_module.from_settings(settings) if metrics is None else metrics
        self.dispatcher = Dispatcher(app, send_sent_events=settings.send_sent_events, fast=settings.fast_publish)
        self.connections = BeatConnections(settings)
        self.clock = DatabaseClock()
        self.db_backoff = Backoff("Postgres")
        self.outbox = Outbox(app, settings, self.connections, self.dispatcher, self.clock, self.metrics,
                             after_commit=lambda: self.after_commit(), after_publish=lambda: self.after_publish())
        self.housekeeping = Housekeeping(settings, self.connections, self.outbox, self.metrics,
                                         preparing=lambda: self.prepared is not None)
        self.preparer = Preparer(settings, self.connections, self.dispatcher, self.outbox, self.clock, self.metrics,
                                 held_back=lambda: self.housekeeping.retention.running)

    # -- hooks for subclasses ------------------------------------------------------

    def after_commit(self) -> None:
        """Called right after a claim transaction commits, before its fires are published."""

    def after_publish(self) -> None:
        """Called once the broker confirmed fires, before they are marked sent."""

    # -- state ---------------------------------------------------------------------------

    @property
    def prepared(self) -> Prepared | None:
        """The instant held prepared in the open transaction, None when there is none."""
        return self.preparer.prepared

    @property
    def connected(self) -> bool:
        """Whether both connections are open."""
        return self.connections.connected

    def connect(self) -> None:
        """Open the claims and ledger connections (raises psycopg errors)."""
        if not self.connections.connected:
            self.close_connections()
            self.connections.open()

    def close_connections(self) -> None:
        """Close both connections; an open transaction rolls back, so its fires are claimed again."""
        if self.preparer.prepared is not None:
            log.warning("runledger: %d fire(s) recorded ahead rolled back; they will be claimed again",
                        self.preparer.prepared.size)
        self.preparer.discard()
        self.connections.close()

    def sweep_soon(self) -> None:
        """Sweep the outbox at the next step (rows were queued to publish at once: backfill, manual trigger)."""
        self.housekeeping.sweep_soon()

    # -- one step --------------------------------------------------------------------

    def run_once(self) -> float:
        """Do all due work without sleeping; return the seconds until there is work again."""
        if self.db_backoff.active:
            return min(self.db_backoff.until - time.monotonic(), self.max_wait)
        preparer, outbox, house = self.preparer, self.outbox, self.housekeeping
        try:
            self.connect()
            house.start()
            outbox.publish_backlog()
            outbox.publish_held()
            if preparer.due():
                preparer.commit()
                outbox.settle(wait=True)  # mark the instant sent before preparing the next one
            if preparer.prepared is None and house.partitions_due():
                outbox.settle(wait=True)
                house.make_partitions()  # between instants: no prepared transaction holds locks
            if preparer.prepared is None:
                house.retention.start_if_due()  # in the background: see retention.py
            preparer.record()
            outbox.settle(wait=True)  # every confirm in before beat sleeps
            if house.sweep_due() and not preparer.imminent():
                house.sweep()
            house.beat_tick()
            if self.metrics.enabled:
                house.refresh_metrics()
            due = None if preparer.prepared is not None else preparer.seconds_until_due()
            self.db_backoff.succeeded()
        except psycopg.Error as exc:  # lost connection, or a statement the server refused: start afresh
            self.close_connections()
            return min(self.db_backoff.failed(safe_error(exc, self.settings.dsn)), self.max_wait)
        return self._wait_for(due)

    def _wait_for(self, due: float | None) -> float:
        """Seconds to sleep: until the next held fire, the prepared commit, or the next cursor."""
        preparer, outbox = self.preparer, self.outbox
        cap = self.max_wait
        if not self.settings.listens:
            cap = min(cap, self.settings.poll_interval)
        if outbox.broker_backoff.active and outbox.backlog:
            cap = min(cap, max(0.0, outbox.broker_backoff.until - time.monotonic()))
        now = time.time()
        held = outbox.next_held()
        if held is not None:
            cap = min(cap, max(held - now, 0.0) + WAKE_MARGIN)
        if preparer.prepared is not None:
            return 0.0 if preparer.claims_left else max(0.0, min(cap, preparer.prepared.commit_at - now + WAKE_MARGIN))
        if due is None:
            return cap
        if due <= 0 and self.housekeeping.retention.running:
            # The retention drops hold this beat's preparing back: look again shortly, and at the instant at the
            # latest.
            return max(0.0, min(cap, RETENTION_POLL, due + preparer.lead + WAKE_MARGIN))
        if preparer.contended and due <= 0:
            # Every row in the window is locked by another beat, which fires it at its
            # instant; look again then (sooner if it is already past: that beat may be gone).
            due = max(due + self.settings.lookahead, CONTENDED_RETRY)
        return max(0.0, min(cap, due + WAKE_MARGIN))

    # -- shutdown ------------------------------------------------------------------------

    def close(self, drain_timeout: float | None = None) -> None:
        """Publish committed fires still held (at their instants, waiting at most ``drain_timeout`` s,
        by default the lookahead plus one second), roll back the prepared instant, release everything."""
        limit = self.settings.lookahead + 1.0 if drain_timeout is None else drain_timeout
        try:
            self.outbox.drain(time.time() + limit, SHUTDOWN_CONFIRM_TIMEOUT)
            self.housekeeping.leave()
        except Exception as exc:  # shutting down: whatever failed, the recovery sweep republishes
            log.warning("runledger: shutdown could not publish everything (%s); the recovery sweep will",
                        safe_error(exc, self.settings.dsn))
        self.outbox.forget()
        self.close_connections()
        self.housekeeping.close()
        self.dispatcher.close()
        self.metrics.close()
