"""Preparing instants: claim a coming instant's schedules ahead of it and record its fires in a transaction kept
open until it.

Up to ``runledger_lookahead`` before an instant (stretched for a big one to the time its fires take to prepare at
this beat's measured rate) one beat at a time (a transaction-scoped advisory lock) claims the schedules due then,
records their ledger rows and advances their cursors on the claims connection without committing, and has their
messages built (the first ``max_prepared`` kept in memory, the rest parked on disk or kept by id: overflow.py). At
the instant the outbox commits and publishes them. Rows already due are claimed by every beat and committed at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..publish.dispatcher import Dispatcher
from ..publish.fires import Fire
from ..settings import Settings
from .claim import GROUP_WINDOW_SECONDS, FaultPolicy, record_pass
from .connections import IDLE_MARGIN, BeatConnections, DatabaseClock
from .instant import Prepared
from .metrics import NoMetrics
from .outbox import Outbox
from .overflow import ParkedFires

#: Passes run back to back in one call while batches come back full.
MAX_PASSES_PER_RUN = 100
#: Fires recorded ahead whose messages are built and kept in memory, at most (bounds memory: about 2.5 kB each).
MAX_PREPARED = 10_000
#: Fires recorded ahead in one open transaction, at most. Those past MAX_PREPARED are parked on disk encoded, or
#: kept by id and read back after the commit (overflow.py), and published a chunk at a time.
MAX_AHEAD = 500_000
#: Fires prepared per second assumed until this beat has measured its own rate (a slow machine's; on the low side).
INITIAL_PREPARE_RATE = 1500.0
#: The lookahead stretches to this many times the time an instant's fires take to prepare, plus the margin (s).
STRETCH_SAFETY = 1.5
STRETCH_MARGIN = 0.25
#: Fires an instant needs before its preparation time teaches the rate (fewer: timer noise).
RATE_MIN_FIRES = 500
#: The prepared instant counts as imminent this many seconds before its commit (bookkeeping waits until after it).
IMMINENT = 0.1


class Preparer:
    """Claims and records fires: those due now are committed at once, those of the next instant within the
    lookahead wait in the open transaction (``prepared``) until the outbox commits them at their instant."""

    def __init__(self, settings: Settings, connections: BeatConnections, dispatcher: Dispatcher, outbox: Outbox,
                 clock: DatabaseClock, metrics: NoMetrics, held_back: Callable[[], bool]) -> None:
        self.settings = settings
        self.connections = connections
        self.dispatcher = dispatcher
        self.outbox = outbox
        self.clock = clock
        self.metrics = metrics
        self.held_back = held_back  # whether preparing ahead must wait (the retention drops need the prepare lock)
        self.faults = FaultPolicy(delay=settings.defer_seconds, quarantine_after=settings.quarantine_after)
        self.prepared: Prepared | None = None
        self.max_prepared = MAX_PREPARED
        self.lead = settings.lookahead           # how far ahead the next instant is prepared (seconds_until_due)
        self.prepare_rate = INITIAL_PREPARE_RATE  # fires prepared per second, as measured
        self.contended = False     # the last claim found due rows all locked by other beats
        self.claims_left = False   # the last claim pass came back full: more may be due in the lookahead
        self._fires = 0            # fires of the prepared group, and the seconds spent preparing them
        self._seconds = 0.0

    def due(self) -> bool:
        """Whether the prepared instant has come."""
        return self.prepared is not None and time.time() >= self.prepared.commit_at

    def imminent(self) -> bool:
        """Whether the prepared instant commits within IMMINENT seconds."""
        return self.prepared is not None and self.prepared.commit_at - time.time() < IMMINENT

    def commit(self) -> None:
        """Hand the prepared instant to the outbox, which commits and publishes it."""
        prepared, self.prepared = self.prepared, None
        assert prepared is not None
        self._learn_rate()
        self.outbox.commit(prepared)

    def discard(self) -> None:
        """Forget the prepared instant (its transaction rolled back: the fires will be claimed again)."""
        if self.prepared is not None:
            self.prepared.discard()
            if self.prepared.staged:
                self.dispatcher.discard_staged()
        self.prepared = None
        self._fires, self._seconds = 0, 0.0

    def seconds_until_due(self) -> float | None:
        """Seconds until the next instant should start being prepared.

        That is ``runledger_lookahead`` before it, stretched for a big instant to
        the time its fires take to prepare (counted, at this beat's measured rate,
        with a margin), at most ``runledger_max_lookahead``: ten thousand fires
        due in one second are recorded and built before it, not after.
        """
        base, most = self.settings.lookahead, self.settings.max_lookahead
        ledger = self.connections.ledger
        if base <= 0 or most <= base:
            self.lead = base
            return ledger.seconds_until_due(base)
        due = ledger.seconds_until_due(most)
        if due is None or due > 0:
            self.lead = base
            return due  # wake when the next instant is within reach, and size it then
        size = ledger.next_instant_size(MAX_AHEAD, GROUP_WINDOW_SECONDS)
        self.lead = min(most, max(base, STRETCH_SAFETY * size / self.prepare_rate + STRETCH_MARGIN))
        return due + most - self.lead

    def record(self) -> None:
        """Claim and record passes back to back while they come back full (at most MAX_PASSES_PER_RUN)."""
        batch = self.settings.batch_size
        self.claims_left = False
        for _ in range(MAX_PASSES_PER_RUN):
            if self.prepared is not None and self.prepared.size >= MAX_AHEAD:
                return
            claimed = self._record_batch(batch)
            if self.dispatcher.in_flight():
                self.outbox.settle(wait=False)  # mark sent what is confirmed while the next batch is recorded
            if claimed < batch:
                self._stage()
                return
        self.claims_left = True  # wake at once to go on (a big instant takes more passes than one run)

    def _stage(self) -> None:
        """Hand the broker the prepared instant's messages ahead of its COMMIT (on Redis: MULTI and the commands,
        held unexecuted until the EXEC that follows the COMMIT), so only the EXEC is left on the instant's path.
        The usual case only: one instant, every fire in memory, no cap. The broker runs them only when the outbox
        publishes these very fires, after their COMMIT returned; a changed or rolled back instant drops them."""
        prepared = self.prepared
        if (prepared is None or prepared.staged == len(prepared.outgoing) or prepared.parked is not None
                or prepared.by_id or self.outbox.pacer is not None or self.outbox.broker_backoff.failing
                or not self.dispatcher.stages()
                or any(item.fire.scheduled_for != prepared.last for item in prepared.outgoing)):
            return
        if self.dispatcher.stage(prepared.outgoing):
            prepared.staged = len(prepared.outgoing)

    def _record_batch(self, batch: int) -> int:
        """One claim pass; returns how many schedules it claimed."""
        prepared, claims = self.prepared, self.connections.claims
        lookahead = self.lead  # never below runledger_lookahead (see seconds_until_due)
        held_back = False
        if prepared is None and self.settings.pooled:  # a new transaction, on a connection without timeouts
            t = self.connections.timeouts()
            claims.set_local_timeouts(t["statement_timeout"], t["lock_timeout"],
                                      t["idle_in_transaction_session_timeout"])
        if prepared is None and lookahead > 0:
            held_back = self.held_back()
            if held_back or not claims.try_prepare_lock():
                # This beat's retention drops need the lock, or another beat is preparing an instant: take only
                # what is due.
                lookahead = 0.0
        if prepared is None and lookahead > self.settings.lookahead:
            # Only this stretched transaction may idle longer: a frozen beat's small instants are still
            # released after the plain lookahead plus the margin.
            claims.stretch_idle_timeout(lookahead + IDLE_MARGIN)
        began = time.monotonic()
        result = record_pass(claims, batch, lookahead, prepared.start if prepared else None, self.faults)
        if result.clock_offset is not None:
            self.clock.offset = result.clock_offset
        if prepared is None:
            self.contended = result.claimed == 0 and not held_back
        if self.metrics.enabled:
            self.metrics.fired("skipped", result.skipped)
            self.metrics.fired("deferred", result.deferred)
        if result.fires:
            self._add(result.fires)
        if self.prepared is not None:
            self._fires += len(result.fires)
            self._seconds += time.monotonic() - began
        if self.prepared is None:
            claims.conn.commit()  # nothing waits: end the claim's transaction now
        elif self.due():
            self.commit()
        return result.claimed

    def _learn_rate(self) -> None:
        """Fold the prepared group's preparation time into the measured rate."""
        fires, seconds = self._fires, self._seconds
        self._fires, self._seconds = 0, 0.0
        if fires >= RATE_MIN_FIRES and seconds > 0:
            self.prepare_rate = 0.5 * self.prepare_rate + 0.5 * fires / seconds

    def _add(self, fires: list[Fire]) -> None:
        """Keep fires recorded ahead: built, up to max_prepared; past that parked or by id (overflow.py)."""
        room = max(0, self.max_prepared - (len(self.prepared.outgoing) if self.prepared is not None else 0))
        outgoing = self.dispatcher.prepare(fires[:room], encode=not self.outbox.broker_backoff.failing)
        instants = [f.scheduled_for for f in fires if f.scheduled_for is not None]
        first, last = min(instants), max(instants)
        if self.prepared is None:
            self.prepared = Prepared(first, self.clock.local(first), outgoing, last)
        else:
            self.prepared.outgoing.extend(outgoing)
            self.prepared.commit_at = min(self.prepared.commit_at, self.clock.local(first))
            self.prepared.last = max(self.prepared.last, last)
        # Picked out now, not at the instant: the commit then checks only these (usually none).
        self.prepared.overlap += [f for f in fires if f.overlap_skip or f.overlap_policy != "allow"]
        rest = fires[room:]
        if rest:
            self._overflow(self.prepared, rest)

    def _overflow(self, prepared: Prepared, fires: list[Fire]) -> None:
        """Park the fires encoded on a fast path; keep the others (any publisher) by id."""
        by_id = fires
        if not self.outbox.broker_backoff.failing and self.dispatcher.publisher() in ("amqp", "redis"):
            by_id = []
            for item in self.dispatcher.prepare(fires):
                if item.frames is None and not item.pushes:
                    by_id.append(item.fire)  # its message could not be built now: tried again after the commit
                    continue
                if prepared.parked is None:
                    prepared.parked = ParkedFires()
                prepared.parked.add(item)
        if not by_id:
            return
        for fire in by_id:
            prepared.by_id.add(fire.id)
        low, high = min(f.scheduled_for for f in by_id), max(f.scheduled_for for f in by_id)
        known = prepared.by_id_range
        prepared.by_id_range = (min(low, known[0]), max(high, known[1])) if known else (low, high)
