"""A beat's two working connections, and the database clock as seen from this host.

*claims* (not autocommit) holds the transaction an instant is prepared in; *ledger* (autocommit) does the
bookkeeping: marks, sweeps, the beat's row, metrics. Both carry statement, lock and idle-in-transaction
timeouts, so a frozen or cut-off beat cannot hold locks for long.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import datetime

import psycopg

from ..db.beat_store import BeatStore
from ..db.connect import connect
from ..settings import Settings

log = logging.getLogger(__name__)

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
        self._claims_store: BeatStore | None = None
        self._cursor_warned = False  # the missing grant on runledger_advance_cursors was logged

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
        timeouts = dict(self.timeouts(), pool_mode=self.settings.pool_mode)
        try:
            # The claim statement nulls and names out-of-range instants itself: psycopg's fast C loaders suffice.
            self._claims = connect(dsn, schema, application_name="runledger_beat", safe_timestamps=False, **timeouts)
            self._ledger = connect(dsn, schema, autocommit=True, application_name="runledger_beat.ledger", **timeouts)
            self._claims_store = BeatStore(self._claims, cursor_function=self._cursor_function(self.ledger))
        except BaseException:
            self.close()
            raise

    def _cursor_function(self, ledger: BeatStore) -> bool:
        """Whether cursors move through runledger_advance_cursors(); when this role may not call it, they move by a
        plain UPDATE the audit log records, and beat says once which GRANT to add."""
        state = ledger.cursor_function_state()
        if not state["allowed"] and not self._cursor_warned:
            self._cursor_warned = True
            schema = self.settings.schema
            if state["present"]:
                log.warning("runledger: this role may not EXECUTE %s.runledger_advance_cursors, so beat moves "
                            "cursors with a plain UPDATE and the audit log records every move as a change; "
                            "GRANT EXECUTE ON FUNCTION %s.runledger_advance_cursors(uuid[], timestamptz[], boolean[]) "
                            "TO %s (see `runledger-beat grants beat`)", schema, schema, ledger.conn.info.user)
            else:
                log.warning("runledger: %s has no runledger_advance_cursors() yet, so the audit log records every "
                            "cursor move as a change; run `runledger-beat migrate`", schema)
        return bool(state["allowed"])

    @property
    def connected(self) -> bool:
        """Whether both connections are open."""
        return all(c is not None and not c.closed for c in (self._claims, self._ledger))

    @property
    def claims(self) -> BeatStore:
        """The store on the claims connection (holds the open transaction)."""
        assert self._claims_store is not None and self._claims_store.conn is self._claims
        return self._claims_store

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
        self._claims_store = None


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
