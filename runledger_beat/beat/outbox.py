"""The outbox: commit a prepared instant at its instant, publish its fires, settle what the broker confirmed.

Nothing is published before its instant, nor before the transaction that recorded it commits. Fires committed
before their instant wait in ``held`` until it comes; fires a broker outage stopped wait in ``backlog`` and are
published again when it answers; a fire the broker refuses on its own is left pending for the recovery sweep.
The ledger marks of a burst are written once nothing is in flight (the UPDATEs would take the database's share
of the machine from the broker mid-burst). An instant bigger than beat keeps in memory goes out a chunk at a
time under the publishing lock, so no other beat's sweep takes its pending rows for abandoned.
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any

import psycopg

from ..backoff import Backoff
from ..db.redaction import safe_error
from ..publish.amqp import CONFIRM_TIMEOUT
from ..publish.dispatcher import Dispatcher
from ..publish.fires import Fire, Outgoing
from ..settings import Settings
from .claim import cancel_overlapped, revoke_replaced, skip_overlapping
from .connections import BeatConnections, DatabaseClock
from .instant import Prepared
from .metrics import NoMetrics
from .overflow import PackedIds, is_parked
from .pacing import Pacer

log = logging.getLogger(__name__)

#: Fires a beat keeps in memory to republish itself after a broker outage.
MAX_BACKLOG = 100_000
#: Fires of a big instant written per chunk (parked ones as they were encoded, those kept by id read back).
SPILL_CHUNK = 5000
#: Fires marked sent per statement when marks wait for the end of a read-back burst.
MARK_CHUNK = 20_000


class Outbox:
    """Commits prepared instants and publishes, holds, settles and keeps the fires of one beat."""

    def __init__(self, app: Any, settings: Settings, connections: BeatConnections, dispatcher: Dispatcher,
                 clock: DatabaseClock, metrics: NoMetrics, after_commit: Callable[[], None],
                 after_publish: Callable[[], None]) -> None:
        self.app = app
        self.settings = settings
        self.connections = connections
        self.dispatcher = dispatcher
        self.clock = clock
        self.metrics = metrics
        self.after_commit = after_commit      # called right after a claim transaction commits
        self.after_publish = after_publish    # called once the broker confirmed fires, before they are marked
        self.broker_backoff = Backoff("broker")
        self.chunk = SPILL_CHUNK
        rate = settings.max_fires_per_second
        self.pacer = Pacer(rate) if rate else None  # runledger_max_fires_per_second (pacing.py)
        self.held: list[tuple[float, int, Outgoing]] = []  # committed, waiting for their instant
        self.backlog: dict[Any, Fire] = {}   # stopped by a broker outage, published again when it answers
        self._held_seq = 0
        self._to_mark = PackedIds()  # confirmed fires whose mark waits for the rest of their burst (settle)
        self._holding_marks = False  # an instant bigger than beat holds is being published (_publish_overflow)
        self._publishing_held = False  # meanwhile, whether this beat holds the publishing lock (hold_publishing)
        self._instants: dict[Any, datetime | None] = {}  # fire id -> scheduled_for while in flight (lag metric)

    @property
    def holds_publishing_lock(self) -> bool:
        """Whether this beat holds the publishing lock now (while an instant bigger than it holds goes out)."""
        return self._publishing_held

    def waiting(self) -> set[Any]:
        """Ids of the fires this beat itself will publish: held for their instant or kept after an outage."""
        return {item.fire.id for _, _, item in self.held} | set(self.backlog)

    def next_held(self) -> float | None:
        """Local time of the earliest held fire's instant, None when nothing is held."""
        return self.held[0][0] if self.held else None

    # -- the instant ---------------------------------------------------------------------

    def commit(self, prepared: Prepared) -> None:
        """Commit the open transaction at its instant and publish what is due; hold the rest.

        Cyclic garbage collection is off meanwhile: an instant's objects are acyclic (reference counting
        frees them), and a collection over beat's whole heap in the middle of a burst costs more than the burst.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._commit_and_publish(prepared)
        finally:
            if was_enabled:
                gc.enable()

    def _commit_and_publish(self, prepared: Prepared) -> None:
        claims = self.connections.claims
        skipped = skip_overlapping(claims, prepared.overlap)
        cancelled = cancel_overlapped(claims, prepared.overlap)
        try:
            claims.conn.commit()
        except BaseException:
            self.dispatcher.discard_staged()  # what Preparer.stage handed the broker stays unexecuted
            raise
        self.after_commit()
        if cancelled:
            revoke_replaced(self.app, cancelled)
        if skipped:
            self.metrics.fired("skipped", len(skipped))
            log.info("runledger: held back %d fire(s) (skipped or buffered): previous run still queued or running",
                     len(skipped))
        outgoing, prepared.outgoing = prepared.outgoing, []  # each fire is let go once confirmed
        if prepared.parked is not None or prepared.by_id:
            self._publish_overflow(prepared, outgoing, skipped)
        else:
            self.release(outgoing, skipped, prepared.last)

    def _publish_overflow(self, prepared: Prepared, outgoing: list[Outgoing], skipped: set[uuid.UUID]) -> None:
        """Publish the committed fires of an instant bigger than beat holds, a chunk at a time: those in memory
        (``outgoing``, emptied as it goes), the parked ones as they were encoded, then those kept by id, read
        back and built (the broker taking one chunk while the next is read). Those an overlap policy held back
        are left out. If beat stops half way, the recovery sweep publishes the rest (the rows are committed,
        pending).

        The confirmed are marked sent after the last chunk: the UPDATEs would otherwise take the database's
        share of the machine from the broker while it works (a crash in between republishes them, as any
        unmarked fire is). Until then the ledger connection holds the publishing lock, so that no other
        beat's recovery sweep takes the instant's rows, pending past the grace on a slow broker, for abandoned.
        """
        with self._publishing_lock():
            with self._marks_deferred():
                self.release(outgoing, skipped, prepared.last)
                outgoing.clear()
                if prepared.parked is not None:
                    with contextlib.closing(prepared.parked) as parked:
                        for chunk in parked.chunks(self.chunk):
                            self._hold_publishing()
                            self.release(chunk, skipped, prepared.last)
                if prepared.by_id:
                    self._read_back(prepared)
            self.settle(wait=True)

    @contextlib.contextmanager
    def _publishing_lock(self) -> Iterator[None]:
        """The publishing lock for the block: taken now if it can be (else before a later chunk, see
        ``_hold_publishing``), released at the end if it was taken."""
        if not self._pacing():
            self._publishing_held = False
        try:
            self._hold_publishing()
            yield
        finally:
            if not self._pacing():  # fires spread under the cap still wait: publish_held lets it go after them
                self._let_go_publishing()

    def _pacing(self) -> bool:
        """Whether fires spread under the cap wait to be published."""
        return self.pacer is not None and bool(self.held)

    def _let_go_publishing(self) -> None:
        """Release the publishing lock if this beat holds it."""
        if self._publishing_held:
            self._publishing_held = False
            with contextlib.suppress(psycopg.Error):  # a broken session has dropped the lock already
                self.connections.ledger.release_publishing()

    @contextlib.contextmanager
    def _marks_deferred(self) -> Iterator[None]:
        """No ledger marks are written during the block (``settle`` keeps them for after it)."""
        self._holding_marks = True
        try:
            yield
        finally:
            self._holding_marks = False

    def _hold_publishing(self) -> None:
        """Take the publishing lock, unless held already: at the commit, then before each chunk, since a sweep in
        progress at the commit keeps it for its transaction (that sweep takes only rows older than the instant's).
        Not in pool mode "transaction": the lock is a session's, and a transaction pooler would leave it on
        whichever server process took it; the recovery grace alone then keeps sweeps off the instant's rows."""
        if not self._publishing_held and not self.settings.pooled:
            with contextlib.suppress(psycopg.Error):  # without the ledger, publishing goes on: marks will fail anyway
                self._publishing_held = self.connections.ledger.hold_publishing()

    def _read_back(self, prepared: Prepared) -> None:
        """Each chunk is read on the claims connection (idle between transactions now) by a helper thread while
        this one builds and writes the chunk before it."""
        ids = prepared.by_id
        assert prepared.by_id_range is not None
        first, last = prepared.by_id_range
        claims = self.connections.claims
        step = self.chunk

        def read(start: int) -> list[Fire]:
            try:
                return [Fire(fid, sid, name, job_type, payload, options or {}, at)
                        for fid, sid, name, job_type, payload, options, at
                        in claims.read_kept_by_id(ids.slice(start, start + step), first, last)]
            finally:
                claims.conn.rollback()  # end the read's transaction

        with ThreadPoolExecutor(1, thread_name_prefix="runledger-read-back") as reader:
            pending = reader.submit(read, 0)
            for start in range(0, len(ids), step):
                fires = pending.result()
                self._hold_publishing()
                if start + step < len(ids):
                    pending = reader.submit(read, start + step)
                self.release(self.dispatcher.prepare(fires, encode=not self.broker_backoff.failing), set(), last)

    def release(self, outgoing: list[Outgoing], skipped: set[uuid.UUID], last: datetime) -> None:
        """Publish the committed fires due now; hold those of a later instant, drop those held back."""
        if self.pacer is not None:
            self._pace([item for item in outgoing if item.fire.id not in skipped])
            return
        now = time.time()
        if self.clock.local(last) <= now and not skipped:  # the usual case: one instant, all due
            self.publish(outgoing, wait=False)
            return
        due = []
        for item in outgoing:
            if item.fire.id in skipped:
                continue
            at = self.clock.local(item.fire.scheduled_for) if item.fire.scheduled_for else now
            if at <= now:
                due.append(item)
            else:
                self._held_seq += 1
                bisect.insort(self.held, (at, self._held_seq, item))
        self.publish(due, wait=False)

    def _pace(self, outgoing: list[Outgoing]) -> None:
        """Under the cap: hold every fire until the pacer's time for it, earliest scheduled first, and hold the
        publishing lock meanwhile (so no other beat's sweep takes the waiting rows, pending, for abandoned)."""
        outgoing.sort(key=lambda item: item.fire.scheduled_for or datetime.min.replace(tzinfo=timezone.utc))
        now = time.time()
        times = self.pacer.times([self.clock.local(item.fire.scheduled_for) if item.fire.scheduled_for else now
                                  for item in outgoing])
        first = self._held_seq + 1
        self._held_seq += len(outgoing)
        self.held.extend(zip(times, range(first, first + len(outgoing)), outgoing, strict=True))
        self.held.sort(key=lambda entry: entry[:2])
        if self.held:
            self._hold_publishing()
        self.publish_held()

    # -- publishing ----------------------------------------------------------------------

    def publish_held(self) -> None:
        """Publish the held fires whose instant has come."""
        cut = bisect.bisect_right(self.held, (time.time(), float("inf")))
        if cut:
            due = [item for _, _, item in self.held[:cut]]
            del self.held[:cut]
            self.publish(due, wait=False)
        if self.pacer is not None and not self.held and self._publishing_held and not self._holding_marks:
            self._let_go_publishing()

    def publish_backlog(self) -> None:
        """Publish again what a broker outage stopped, once the back-off allows.

        The rows are locked first and stay locked until marked: another beat's recovery sweep, which finds them
        pending past the grace after a long outage, skips them, and one it is publishing itself is left to it
        (once published it is no longer pending, and leaves the backlog)."""
        if not self.backlog or self.broker_backoff.active:
            return
        ledger = self.connections.ledger
        with ledger.conn.transaction():
            mine = ledger.claim_backlog(list(self.backlog))
            for fire_id in [i for i in self.backlog if i not in mine]:
                del self.backlog[fire_id]
            self.publish([Outgoing(f) for f in list(self.backlog.values())])

    def publish(self, outgoing: list[Outgoing], wait: bool = True) -> None:
        """Publish committed fires; with ``wait`` settle them too (else the next settle does)."""
        if not outgoing:
            return
        if self.broker_backoff.active:
            self._keep([o.fire for o in outgoing], "broker unavailable", backlog=True)
            return
        if log.isEnabledFor(logging.INFO):
            self._log_sending(outgoing)
        if self.metrics.enabled:  # for the lag histogram only: 10k dict entries cost ~7 ms at an instant
            self._instants.update((o.fire.id, o.fire.scheduled_for) for o in outgoing)
        self.dispatcher.send(outgoing)
        self.settle(wait)

    def _log_sending(self, outgoing: list[Outgoing]) -> None:
        names = ": " + ", ".join(o.fire.schedule_name or o.fire.job_type for o in outgoing) \
            if len(outgoing) <= 3 else ""
        first = min((o.fire.scheduled_for for o in outgoing if o.fire.scheduled_for), default=None)
        late = f" ({1000 * (time.time() - self.clock.local(first)):.0f} ms after the instant)" if first else ""
        log.info("runledger: sending %d fire(s)%s%s", len(outgoing), names, late)

    def settle(self, wait: bool = True, timeout: float = CONFIRM_TIMEOUT) -> None:
        """Mark sent what the broker confirmed (marks a lost connection stopped are kept for the next settle); keep
        failed fires pending (and in memory on an outage).

        While fires are still in flight the marks wait (without ``wait``): the UPDATEs would take the
        database's share of the machine from the broker mid-burst. They are made once nothing is in flight,
        at the latest at the next settle that waits (every pass of the loop ends with one); while an instant
        bigger than beat holds goes out, after its last chunk (``_publish_overflow``).
        """
        result = self.dispatcher.collect(wait, timeout)
        if result.sent:
            if self.backlog:
                for fire_id in result.sent:
                    self.backlog.pop(fire_id, None)
            self.after_publish()
            self._to_mark.extend(result.sent)
            if self.metrics.enabled:
                self._observe_sent([self._instants.pop(fire_id, None) for fire_id in result.sent])
        if len(self._to_mark) and not self._holding_marks and (wait or not self.dispatcher.in_flight()):
            to_mark, self._to_mark = self._to_mark, PackedIds()
            for start in range(0, len(to_mark), MARK_CHUNK):
                try:
                    self.connections.ledger.mark_sent(to_mark.slice(start, start + MARK_CHUNK))
                except psycopg.Error:
                    # The connection is lost (or its node turned read-only): the marks not made are kept and made
                    # once beat is connected again (to the new primary after a failover), well within the grace
                    # after which another beat's recovery sweep would take the confirmed fires for unpublished.
                    self._to_mark.extend(to_mark.slice(start, len(to_mark)))
                    raise
        if result.error is not None:
            self.broker_backoff.failed(safe_error(result.error))
        elif result.sent:
            self.broker_backoff.succeeded()
        by_reason: dict[str, list[Fire]] = defaultdict(list)
        for fire, reason in result.failed:
            by_reason[reason].append(fire)
        for reason, fires in by_reason.items():
            self._keep(fires, reason, backlog=result.error is not None)

    def _observe_sent(self, instants: list[datetime | None]) -> None:
        """Count confirmed fires and observe their lag from their instant to now, on the database clock."""
        self.metrics.fired("sent", len(instants))
        now = self.clock.now()
        for instant in instants:
            if instant is not None:
                self.metrics.lag(now - instant.timestamp())

    def _keep(self, fires: list[Fire], error: str, backlog: bool) -> None:
        """Record a failed publish; on a broker outage also keep the fires in memory to republish promptly.

        A fire the broker refused on its own (a bad exchange, say) is left to the
        recovery sweep, so it cannot hold up the others.
        """
        ids = [f.id for f in fires]
        for fire in fires:
            self._instants.pop(fire.id, None)
        if self.metrics.enabled:
            self.metrics.publish_failed()
        if backlog:
            for fire in fires:
                if len(self.backlog) < MAX_BACKLOG and not is_parked(fire):  # a parked one waits for the sweep
                    self.backlog[fire.id] = fire
            self.connections.ledger.note_publish_outage(ids, error)
            return
        for fire in fires:
            self.backlog.pop(fire.id, None)
        dead = self.connections.ledger.mark_publish_failed(ids, error, self.settings.max_publish_attempts)
        if self.metrics.enabled:
            self.metrics.fired("failed", len(fires))
        log.warning("runledger: publishing %d fire(s) failed (%s); %s", len(fires), error,
                    f"{len(dead)} reached {self.settings.max_publish_attempts} attempts and are marked failed"
                    if dead else "the recovery sweep will retry")

    # -- shutdown ------------------------------------------------------------------------

    def drain(self, deadline: float, confirm_timeout: float) -> None:
        """Publish the held fires at their instants until ``deadline`` (local time), then settle."""
        while self.held and self.connections.connected and time.time() < deadline:
            time.sleep(max(0.0, min(self.held[0][0] - time.time(), deadline - time.time())))
            self.publish_held()
        if self.held:
            log.warning("runledger: %d committed fire(s) not published at shutdown; the recovery sweep "
                        "of any beat publishes them", len(self.held))
        if self.connections.connected:
            self.settle(wait=True, timeout=confirm_timeout)

    def forget(self) -> None:
        """Drop what is held in memory (shutdown: the recovery sweep covers it)."""
        self.held = []
        self._instants.clear()
