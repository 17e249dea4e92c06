"""A beat's two working connections, and the database clock as seen from this host.

*claims* (not autocommit) holds the transaction an instant is prepared in; *ledger* (autocommit) does the
bookkeeping: marks, sweeps, the beat's row, metrics. Both carry statement, lock and idle-in-transaction
timeouts, so a frozen or cut-off beat cannot hold locks for long.
"""

from __future__ import annotations

import contextlib
import time
from datetime import datetime

import psycopg

from ..db.beat_store import BeatStore
from ..db.connect import connect
from ..settings import Settings

#: Seconds a statement may run, and a lock be waited for, on beat's connections.
STATEMENT_TIMEOUT = 30.0
LOCK_TIMEOUT = 5.0
#: Idle seconds beyond the lookahead (stretched or not) after which the server ends a frozen beat's open
#: transaction (and its locks).
IDLE_MARGIN = 5.0


class BeatConnections:
    """Opens, hands out and closes the claims and ledger connections of one beat."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._claims: psycopg.Connection | None = None
        self._ledger: psycopg.Connection | None = None

    def timeouts(self) -> dict[str, float]:
        """The timeouts of every connection a beat opens (seconds)."""
        return {"statement_timeout": STATEMENT_TIMEOUT, "lock_timeout": LOCK_TIMEOUT,
                "idle_in_transaction_session_timeout": self.settings.lookahead + IDLE_MARGIN}

    def open(self) -> None:
        """Open both connections unless they are open (raises psycopg errors)."""
        if self.connected:
            return
        self.close()
        dsn, schema = self.settings.dsn, self.settings.schema
        timeouts = self.timeouts()
        # The claim statement nulls and names out-of-range instants itself: psycopg's fast C loaders suffice.
        self._claims = connect(dsn, schema, application_name="runledger_beat", safe_timestamps=False, **timeouts)
        self._ledger = connect(dsn, schema, autocommit=True, application_name="runledger_beat.ledger", **timeouts)

    @property
    def connected(self) -> bool:
        """Whether both connections are open."""
        return all(c is not None and not c.closed for c in (self._claims, self._ledger))

    @property
    def claims(self) -> BeatStore:
        """The store on the claims connection (holds the open transaction)."""
        assert self._claims is not None
        return BeatStore(self._claims)

    @property
    def ledger(self) -> BeatStore:
        """The store on the autocommit bookkeeping connection."""
        assert self._ledger is not None
        return BeatStore(self._ledger)

    def close(self) -> None:
        """Close both connections; an open transaction rolls back, so its fires are claimed again."""
        for conn in (self._claims, self._ledger):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        self._claims = self._ledger = None


class DatabaseClock:
    """The database clock minus this host's wall clock, as measured at the last claim; due-ness is the database's."""

    def __init__(self) -> None:
        self.offset = 0.0

    def local(self, instant: datetime) -> float:
        """The local wall-clock time at which the database clock reads ``instant`` (never early)."""
        return instant.timestamp() - self.offset

    def now(self) -> float:
        """The database clock now, estimated from the local one (seconds since the epoch)."""
        return time.time() + self.offset
