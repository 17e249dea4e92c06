"""Wake-ups on schedule changes: LISTEN on the channel a trigger on job_schedules notifies.

A dropped connection is reopened at the next wait (at most every
REOPEN_INTERVAL seconds); a server that refuses LISTEN (a transaction-mode
pooler) turns listening off for good, with one log line, and beat polls. In pool
mode "transaction" the LISTEN connection is runledger_listen_dsn (a direct one),
and without it there is none: beat polls every runledger_poll_interval.
"""

from __future__ import annotations

import contextlib
import logging
import time

import psycopg

from ..db.beat_store import BeatStore
from ..db.connect import connect
from ..db.redaction import safe_error
from ..db.store import OUTBOX_PAYLOAD
from ..settings import Settings

log = logging.getLogger(__name__)

#: Seconds between attempts to reopen a lost LISTEN connection.
REOPEN_INTERVAL = 5.0


class ChangeListener:
    """A LISTEN connection that tells when schedules changed; see the module docstring."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.enabled = settings.listens
        self._dsn = settings.listen_dsn or settings.dsn
        self._conn: psycopg.Connection | None = None
        self._next_open = 0.0
        self._outbox = False  # a notification asked for an outbox sweep (backfill, manual trigger)

    @property
    def listening(self) -> bool:
        """Whether a LISTEN connection is open now."""
        return self._conn is not None

    def open(self) -> None:
        """Open the connection and LISTEN, unless listening is off or a recent attempt failed."""
        if not self.enabled or self._conn is not None or time.monotonic() < self._next_open:
            return
        self._next_open = time.monotonic() + REOPEN_INTERVAL
        try:
            conn = connect(self._dsn, self.settings.schema, autocommit=True,
                           application_name="runledger_beat.listen", pool_mode="session")
            BeatStore(conn).listen()
            self._conn = conn
        except psycopg.OperationalError:
            self._conn = None  # the server is away: try again later
        except psycopg.Error as exc:
            self._conn = None
            self.enabled = False
            log.warning("runledger: LISTEN unavailable (%s); polling every %ss",
                        safe_error(exc, self._dsn), self.settings.poll_interval)

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s; True if schedules changed (or the connection dropped: look again)."""
        self.open()
        if self._conn is None:
            return False
        try:
            changed = False
            for note in self._conn.notifies(timeout=timeout, stop_after=1):
                changed = True
                self._outbox |= note.payload == OUTBOX_PAYLOAD
            if changed:
                for note in self._conn.notifies(timeout=0):
                    self._outbox |= note.payload == OUTBOX_PAYLOAD
            return changed
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self.close()
            return True

    def take_outbox(self) -> bool:
        """Whether a notification since the last call asked for an outbox sweep."""
        asked, self._outbox = self._outbox, False
        return asked

    def close(self) -> None:
        """Close the connection (reopened by the next wait)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
