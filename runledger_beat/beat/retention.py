"""Days of ledger past runledger_retention dropped in a thread of its own, so beat's loop never waits on the disk.

PostgreSQL frees a dropped table's files at the end of its COMMIT, after the
transaction's locks are released: nobody waits on that but the caller, and the
caller waits as long as the filesystem takes (0.8 ms per MB on the project's
machine, whose disk is mounted with online discard: seconds for a busy day).
So beat's loop only makes partitions ahead (pipeline.py, between instants), and
this thread calls ``runledger_maintain_ledger`` with the retention on its own
short-lived connection, at start and then hourly (a minute on when a lock was
busy or the call failed), as another beat would. The drops lock ``jobs`` for a
few milliseconds each and never ``job_schedules``; while the thread runs, beat
records fires at their instant instead of ahead (``running``), so the drops
find the prepare lock free and no open transaction of beat in their way.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg

from ..db.beat_store import BeatStore
from ..db.connect import connect
from ..db.redaction import safe_error
from ..settings import Settings

log = logging.getLogger(__name__)

#: Seconds before the ledger's maintenance runs again (the loop's partitions ahead, this thread's drops): after
#: it ran, and after a lock was busy or the call failed.
LEDGER_EVERY = 3600.0
LEDGER_RETRY = 60.0


class RetentionDrops:
    """Runs the retention part of ``runledger_maintain_ledger`` in the background when due; one run at a time."""

    def __init__(self, settings: Settings, timeouts: dict[str, float]) -> None:
        self.settings = settings
        self._timeouts = timeouts
        self._next = 0.0
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        """Whether a run is under way."""
        return self._thread is not None and self._thread.is_alive()

    def start_if_due(self) -> bool:
        """Start a run when one is due, none is under way and a retention is set; whether one started."""
        if self.settings.retention is None or self.running or time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + LEDGER_EVERY
        self._thread = threading.Thread(target=self._run, name="runledger-retention", daemon=True)
        self._thread.start()
        return True

    def join(self, timeout: float | None = None) -> None:
        """Wait for a run under way (at most ``timeout`` s)."""
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        dsn, schema = self.settings.dsn, self.settings.schema
        try:
            with connect(dsn, schema, autocommit=True, application_name="runledger_beat.retention",
                         pool_mode=self.settings.pool_mode, **self._timeouts) as conn:
                done = BeatStore(conn).maintain_ledger(self.settings.retention)
        except psycopg.errors.InsufficientPrivilege:
            return  # the loop's partition maintenance already said so, with the GRANT to add
        except psycopg.Error as exc:
            self._next = time.monotonic() + LEDGER_RETRY
            log.warning("runledger: dropping ledger days past the retention failed (%s); trying again in %.0f s",
                        safe_error(exc, dsn), LEDGER_RETRY)
            return
        if log_partitions(done, LEDGER_RETRY):
            self._next = time.monotonic() + LEDGER_RETRY


def log_partitions(done: list[dict], retry: float) -> bool:
    """Log what ``runledger_maintain_ledger`` did, partition by partition; whether a lock was busy."""
    busy = False
    for row in done:
        if row["action"] == "busy":
            busy = True
            log.info("runledger: ledger partition %s is busy (a lock held elsewhere); trying again in %.0f s",
                     row["partition_name"], retry)
        else:
            log.info("runledger: ledger partition %s %s", row["partition_name"], row["action"])
    return busy
