"""Upkeep off the instant's path: the bookkeeping statements that may wait run in a thread on a connection of
their own.

Marking lost and expired runs, releasing buffered fires, pruning the audit log, the missing-hook warning and the
metrics gauges read or write rows anything else may hold (a worker's update, an operator's open transaction) and
scan what grows with the ledger. In beat's loop, a lock wait or a slow scan there would delay the next instant;
here it delays only the next round of upkeep. Each round runs when due (the sweep interval, the gauges' refresh,
hourly pruning), or at once when asked (``soon``); a failed round is logged and tried again at the next.
Publishing stays in beat's loop: a buffered fire released here is published by its next recovery sweep
(``released`` asks for it at once).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

import psycopg

from ..db.beat_store import BeatStore
from ..db.connect import connect
from ..db.redaction import safe_error
from ..settings import Settings
from . import metrics as metrics_module

log = logging.getLogger(__name__)

#: Seconds between prunings of the audit log (entries older than runledger_retention go).
PRUNE_EVERY = 3600.0
#: How long a fire may stay sent with no worker hook seen before beat warns, and how often it warns.
HOOK_WARNING_AFTER = 600.0
HOOK_WARNING_EVERY = 3600.0
#: Seconds before a round that failed (lost connection, lock timeout) is tried again, at most.
RETRY_AFTER = 5.0


class Upkeep:
    """The upkeep thread of one beat (see the module docstring). ``served`` is the last ``soon`` ticket a round
    that began after it has completed."""

    def __init__(self, settings: Settings, timeouts: dict[str, float], metrics: metrics_module.NoMetrics,
                 broker_down: Callable[[], bool], released: Callable[[], None]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.broker_down = broker_down  # while the broker is down, buffered fires stay buffered
        self.released = released        # buffered fires were released: beat's loop should sweep soon
        self.served = 0
        self._asked = 0
        self.sweep_every = max(1.0, min(settings.recovery_grace / 2, 10.0))
        self._timeouts = timeouts
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._conn: psycopg.Connection | None = None
        self._next_sweep = 0.0
        self._next_prune = 0.0
        self._next_hook_warning = 0.0
        self._next_gauges = 0.0

    @property
    def running(self) -> bool:
        """Whether the thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Start the thread unless it runs."""
        if self.running or self._stopping.is_set():
            return
        self._thread = threading.Thread(target=self._loop, name="runledger-upkeep", daemon=True)
        self._thread.start()

    def soon(self) -> int:
        """Run the sweep's part at once (rows were changed that it resolves); returns a ticket, served once a
        round begun after this call has completed."""
        self._asked += 1
        self._next_sweep = 0.0
        self._wake.set()
        return self._asked

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread (a statement under way ends with its timeout at most) and close its connection."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    # -- the thread ------------------------------------------------------------------------

    def _loop(self) -> None:
        failed = False
        while not self._stopping.is_set():
            asked = self._asked
            try:
                self._round()
                self.served = asked
                failed = False
                wait = self._next_due() - time.monotonic()
            except psycopg.Error as exc:
                if not failed:  # one line per outage, not one per retry
                    log.warning("runledger: upkeep failed (%s); trying again in %.0f s",
                                safe_error(exc, self.settings.dsn), RETRY_AFTER)
                failed = True
                self._drop_connection()
                wait = RETRY_AFTER
            self._wake.wait(max(0.0, wait))
            self._wake.clear()
        self._drop_connection()

    def _next_due(self) -> float:
        due = min(self._next_sweep, self._next_prune, self._next_hook_warning)
        return min(due, self._next_gauges) if self.metrics.enabled else due

    def _store(self) -> BeatStore:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.settings.dsn, self.settings.schema, autocommit=True,
                                 application_name="runledger_beat.upkeep", **self._timeouts)
        return BeatStore(self._conn)

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):  # a broken connection: nothing more to do with it
                self._conn.close()
            self._conn = None

    def _round(self) -> None:
        now = time.monotonic()
        store = self._store()
        if now >= self._next_sweep:
            self._next_sweep = now + self.sweep_every
            self._resolve(store)
        if now >= self._next_prune:
            self._next_prune = now + PRUNE_EVERY
            self._prune_audit(store)
        if now >= self._next_hook_warning:
            self._next_hook_warning = now + HOOK_WARNING_EVERY
            self._warn_without_hook(store)
        if self.metrics.enabled and now >= self._next_gauges:
            self._next_gauges = now + metrics_module.GAUGE_REFRESH
            self._gauges(store)

    def _resolve(self, store: BeatStore) -> None:
        """Mark lost and expired runs; release buffered fires whose live run ended unseen by a worker hook."""
        lost = store.mark_lost_runs(self.settings.lost_after)
        if lost:
            log.warning("runledger: marked %d run(s) lost (started, never finished)", len(lost))
        resolved = store.resolve_stale_sent(self.settings.lost_after)
        if resolved:
            expired = sum(1 for r in resolved if r["status"] == "expired")
            log.warning("runledger: %d sent fire(s) expired before a worker took them, %d never started (lost)",
                        expired, len(resolved) - expired)
        if self.broker_down():
            return
        released = store.release_buffered()
        if released:
            log.info("runledger: released %d buffered fire(s)", len(released))
            self.released()

    def _prune_audit(self, store: BeatStore) -> None:
        """Drop audit entries past runledger_retention (the ledger's); a role without the right only logs it."""
        if self.settings.retention is None:
            return
        try:
            store.prune_audit(self.settings.retention)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("runledger: cannot prune %s.schedule_changes (%s); grant DELETE on it to beat's role",
                        self.settings.schema, safe_error(exc))

    def _warn_without_hook(self, store: BeatStore) -> None:
        """Warn (hourly) when sent fires stay unstarted and no worker runs the ledger hook."""
        waiting = store.unresolved_sent_without_hook(HOOK_WARNING_AFTER)
        if waiting:
            log.warning("runledger: %d fire(s) were sent over %.0f s ago and no worker has reported the ledger hook "
                        "within the hour; add runledger_beat.install(app) to the workers' Celery app so the ledger "
                        "follows runs (until then their status stays 'sent')", waiting, HOOK_WARNING_AFTER)

    def _gauges(self, store: BeatStore) -> None:
        try:
            self.metrics.gauges(**store.operation_gauges())
        except psycopg.OperationalError:
            raise  # the connection is gone: the next round opens another
        except psycopg.Error as exc:  # a refused statement (privileges, say): the gauges go stale, no more
            log.warning("runledger: reading the metrics gauges failed: %s", safe_error(exc))
