"""The fire pipeline: prepare, hold, publish, settle and sweep the fires of one beat.

One ``run_once()`` does every due step and returns the seconds until there is
work again:

1. claim and record (materialize.py) the schedules due now, or within the
   lookahead for the next instant, in a transaction kept open until that
   instant (the *prepared* group), building their messages meanwhile;
2. at the instant, apply overlap skips, COMMIT, and publish (dispatch.py);
   fires committed before their instant wait in *held* until it comes;
3. settle: mark sent what the broker confirmed, record what failed;
4. keep fires a broker outage stopped in the *backlog*, republished when it
   answers again; every few seconds sweep the ledger for rows left pending
   (a crashed beat, a failed publish) and mark lost runs.

Nothing is published before its instant, nor before the transaction that
recorded it commits. If beat dies with a prepared group, the transaction rolls
back and the fire is claimed again. With several beats one at a time prepares
ahead (a transaction-scoped advisory lock), so an instant's burst has one
publisher; every beat claims rows already due.

The pipeline owns two connections: *claims* (non-autocommit; holds the open
transaction) and *ledger* (autocommit bookkeeping). It knows nothing of
``celery beat``: scheduler.py drives it, tests drive it directly.
``after_commit`` and ``after_publish`` are empty hooks for subclasses (the
test suite's crash points).
"""

from __future__ import annotations

import bisect
import contextlib
import gc
import logging
import os
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg

from . import __version__
from . import metrics as metrics_module
from .backoff import Backoff
from .db import connect, safe_error
from .dispatch import Dispatcher
from .fastpath import CONFIRM_TIMEOUT
from .fires import Fire, Outgoing
from .materialize import GROUP_WINDOW_SECONDS, FaultPolicy, cancel_overlapped, record_pass, skip_overlapping
from .retention import LEDGER_EVERY, LEDGER_RETRY, RetentionDrops, log_partitions
from .settings import Settings
from .spill import PackedIds, SpillFile, is_parked
from .store import Store

log = logging.getLogger("runledger_beat.pipeline")

#: Passes run back to back in one call while batches come back full.
MAX_PASSES_PER_RUN = 100
#: Fires a beat keeps in memory to republish itself after a broker outage.
MAX_BACKLOG = 100_000
#: Fires recorded ahead whose messages are built and kept in memory, at most (bounds memory: about 2.5 kB each).
MAX_PREPARED = 10_000
#: Fires recorded ahead in one open transaction, at most. Those past MAX_PREPARED are parked on disk encoded, or
#: kept by id and read back after the commit (spill.py), and published a chunk at a time.
MAX_AHEAD = 500_000
SPILL_CHUNK = 5000
#: Fires marked sent per statement when marks wait for the end of a read-back burst.
MARK_CHUNK = 20_000
#: Ledger rows the recovery sweep republishes per pass.
SWEEP_LIMIT = 1000
#: Waking a hair after an instant avoids a spin when clocks round down.
WAKE_MARGIN = 0.002
#: While another beat publishes a big instant, a recovery sweep takes only rows this many graces old.
BUSY_GRACE_FACTOR = 10
#: How soon to look again when due rows are locked by another beat.
CONTENDED_RETRY = 0.05
#: Seconds a statement may run, and a lock be waited for, on beat's connections.
STATEMENT_TIMEOUT = 30.0
LOCK_TIMEOUT = 5.0
#: Fires prepared per second assumed until this beat has measured its own rate (a slow machine's; on the low side).
INITIAL_PREPARE_RATE = 1500.0
#: The lookahead stretches to this many times the time an instant's fires take to prepare, plus the margin (s).
STRETCH_SAFETY = 1.5
STRETCH_MARGIN = 0.25
#: Fires an instant needs before its preparation time teaches the rate (fewer: timer noise).
RATE_MIN_FIRES = 500
#: Idle seconds beyond the lookahead (stretched or not) after which the server ends a frozen beat's open
#: transaction (and its locks).
IDLE_MARGIN = 5.0
#: Seconds between prunings of the audit log (entries older than runledger_retention go).
PRUNE_EVERY = 3600.0
#: Seconds between looks while the retention drops hold preparing back (a run with nothing to drop takes ~20 ms).
RETENTION_POLL = 0.05
#: Seconds shutdown waits for retention drops under way (their thread is a daemon: it ends with beat).
RETENTION_JOIN_TIMEOUT = 5.0
#: Seconds shutdown waits for the broker's next confirm (the recovery sweep covers those never confirmed).
SHUTDOWN_CONFIRM_TIMEOUT = 2.0
#: How long a fire may stay sent with no worker hook seen before beat warns, and how often it warns.
HOOK_WARNING_AFTER = 600.0
HOOK_WARNING_EVERY = 3600.0
#: A beat's row in the beats table is refreshed at most this often (seconds).
BEAT_TICK_EVERY = 1.0
#: Rows of beats silent this long (seconds) are pruned by any beat.
BEAT_STALE_AFTER = 3600.0


@dataclass
class Prepared:
    """Fires recorded in the still-open claim transaction; committed at the first one's instant."""

    start: datetime          # the instant further claims of this transaction are cut to
    commit_at: float         # local wall-clock time of the earliest fire
    outgoing: list[Outgoing]
    last: datetime           # the latest fire's instant
    parked: SpillFile | None = None  # fires past MAX_PREPARED, encoded, on disk (a fast path: RabbitMQ or Redis)
    spilled: PackedIds = field(default_factory=PackedIds)  # fires past MAX_PREPARED by id (the other roads)
    overlap: list[Fire] = field(default_factory=list)  # fires (held or spilled) an overlap policy may hold back
    spilled_range: tuple[datetime, datetime] | None = None    # the instants of those kept by id

    @property
    def size(self) -> int:
        """Fires recorded in the transaction."""
        return len(self.outgoing) + len(self.spilled) + (len(self.parked) if self.parked else 0)


class FirePipeline:
    """Claims, records, commits and publishes the fires of one beat; see the module docstring."""

    def __init__(self, app: Any, settings: Settings, max_wait: float = 5.0,
                 metrics: metrics_module.NoMetrics | None = None) -> None:
        self.app = app
        self.settings = settings
        self.max_wait = max_wait
        self.dispatcher = Dispatcher(app, send_sent_events=settings.send_sent_events, fast=settings.fast_publish)
        self.prepared: Prepared | None = None
        self._claims: psycopg.Connection | None = None
        self._claims_store: Store | None = None
        self._cursor_warned = False  # the missing grant on runledger_advance_cursors was logged
        self._ledger: psycopg.Connection | None = None
        self._held: list[tuple[float, int, Outgoing]] = []  # committed, waiting for their instant
        self._held_seq = 0
        self._backlog: dict[Any, Fire] = {}
        self._clock_offset = 0.0   # database clock minus local wall clock, in seconds
        self._contended = False    # the last claim found due rows all locked by other beats
        self._claims_left = False  # the last claim pass came back full: more may be due in the lookahead
        self._to_mark = PackedIds()  # confirmed fires whose mark waits for the rest of their burst (_settle)
        self._holding_marks = False  # an instant bigger than beat holds is being published (_publish_spilled)
        self._publishing_held = False  # meanwhile, whether this beat holds the publishing lock (hold_publishing)
        self._next_sweep = 0.0
        self._next_hook_warning = 0.0
        self._next_prune = 0.0
        self._next_ledger = 0.0
        self.retention = RetentionDrops(settings, self._timeouts())
        self.faults = FaultPolicy(delay=settings.defer_seconds, quarantine_after=settings.quarantine_after)
        self.db_backoff = Backoff("Postgres")
        self.broker_backoff = Backoff("broker")
        self.beat_id = uuid.uuid4()    # this beat's row in the beats table
        self._host = socket.gethostname()
        self._next_beat_tick = 0.0
        self._beat_row = False         # whether the row was written (and so is removed at close)
        self._beats_table = True       # False once the table turned out to be missing (an unmigrated schema)
        self.metrics = metrics_module.from_settings(settings) if metrics is None else metrics
        self._instants: dict[Any, datetime | None] = {}  # fire id -> scheduled_for while in flight
        self._next_gauges = 0.0
        self.lead = settings.lookahead             # how far ahead the next instant is prepared (see _seconds_until_due)
        self.prepare_rate = INITIAL_PREPARE_RATE    # fires prepared per second, as measured
        self._prepared_fires = 0                    # fires of the prepared group, and the seconds spent preparing them
        self._prepared_seconds = 0.0

    # -- hooks for subclasses ------------------------------------------------------

    def after_commit(self) -> None:
        """Called right after a claim transaction commits, before its fires are published."""

    def after_publish(self) -> None:
        """Called once the broker confirmed fires, before they are marked sent."""

    # -- connections ---------------------------------------------------------------

    def connect(self) -> None:
        """Open the claims and ledger connections (raises psycopg errors)."""
        if self.connected:
            return
        self.close_connections()
        dsn, schema = self.settings.dsn, self.settings.schema
        timeouts = self._timeouts()
        # The claim statement nulls and names out-of-range instants itself: psycopg's fast C loaders suffice.
        try:
            self._claims = connect(dsn, schema, application_name="runledger_beat", safe_timestamps=False, **timeouts)
            self._ledger = connect(dsn, schema, autocommit=True, application_name="runledger_beat.ledger", **timeouts)
            self._claims_store = Store(self._claims, cursor_function=self._cursor_function(Store(self._ledger)))
        except BaseException:
            self.close_connections()
            raise

    def _cursor_function(self, ledger: Store) -> bool:
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

    def _timeouts(self) -> dict[str, float]:
        return {"statement_timeout": STATEMENT_TIMEOUT, "lock_timeout": LOCK_TIMEOUT,
                "idle_in_transaction_session_timeout": self.settings.lookahead + IDLE_MARGIN}

    @property
    def connected(self) -> bool:
        """Whether both connections are open."""
        return all(c is not None and not c.closed for c in (self._claims, self._ledger))

    @property
    def claims(self) -> Store:
        """The store on the claims connection (holds the open transaction)."""
        assert self._claims_store is not None and self._claims_store.conn is self._claims
        return self._claims_store

    @property
    def ledger(self) -> Store:
        """The store on the autocommit bookkeeping connection."""
        assert self._ledger is not None
        return Store(self._ledger)

    def close_connections(self) -> None:
        """Close both connections; an open transaction rolls back, so its fires are claimed again."""
        if self.prepared is not None:
            log.warning("runledger: %d fire(s) recorded ahead rolled back; they will be claimed again",
                        self.prepared.size)
            if self.prepared.parked is not None:
                self.prepared.parked.close()
        self.prepared = None
        self._prepared_fires, self._prepared_seconds = 0, 0.0
        for conn in (self._claims, self._ledger):
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
        self._claims = self._ledger = None
        self._claims_store = None

    # -- one step --------------------------------------------------------------------

    def run_once(self) -> float:
        """Do all due work without sleeping; return the seconds until there is work again."""
        if self.db_backoff.active:
            return min(self.db_backoff.until - time.monotonic(), self.max_wait)
        try:
            self.connect()
            self._publish_backlog()
            self._publish_held()
            if self.prepared is not None and time.time() >= self.prepared.commit_at:
                self._commit_prepared()
                self._settle(wait=True)  # mark the instant sent before preparing the next one
            if self.prepared is None and time.monotonic() >= self._next_ledger:
                self._settle(wait=True)
                self._maintain_ledger(self.ledger)  # between instants: no prepared transaction holds locks
            if self.prepared is None:
                self.retention.start_if_due()  # in the background: see retention.py
            self._record()
            self._settle(wait=True)  # every confirm in before beat sleeps
            if time.monotonic() >= self._next_sweep and not self._commit_imminent():
                self._sweep()
            self._beat_tick()
            if self.metrics.enabled:
                self._refresh_metrics()
            due = None if self.prepared is not None else self._seconds_until_due()
            self.db_backoff.succeeded()
        except psycopg.Error as exc:  # lost connection, or a statement the server refused: start afresh
            self.close_connections()
            return min(self.db_backoff.failed(safe_error(exc, self.settings.dsn)), self.max_wait)
        return self._wait_for(due)

    def _seconds_until_due(self) -> float | None:
        """Seconds until the next instant should start being prepared.

        That is ``runledger_lookahead`` before it, stretched for a big instant to
        the time its fires take to prepare (counted, at this beat's measured rate,
        with a margin), at most ``runledger_max_lookahead``: ten thousand fires
        due in one second are recorded and built before it, not after.
        """
        base, most = self.settings.lookahead, self.settings.max_lookahead
        ledger = self.ledger
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

    def _learn_rate(self) -> None:
        """Fold the prepared group's preparation time into the measured rate."""
        fires, seconds = self._prepared_fires, self._prepared_seconds
        self._prepared_fires, self._prepared_seconds = 0, 0.0
        if fires >= RATE_MIN_FIRES and seconds > 0:
            self.prepare_rate = 0.5 * self.prepare_rate + 0.5 * fires / seconds

    def _record(self) -> None:
        """Claim and record fires: those due now are committed and published at once,
        those of the next instant within the lookahead wait in the open transaction."""
        batch = self.settings.batch_size
        self._claims_left = False
        for _ in range(MAX_PASSES_PER_RUN):
            if self.prepared is not None and self.prepared.size >= MAX_AHEAD:
                return
            claimed = self._record_batch(batch)
            if self.dispatcher.in_flight():
                self._settle(wait=False)  # mark sent what is confirmed while the next batch is recorded
            if claimed < batch:
                return
        self._claims_left = True  # wake at once to go on (a big instant takes more passes than one run)

    def _record_batch(self, batch: int) -> int:
        """One claim pass; returns how many schedules it claimed."""
        prepared, claims = self.prepared, self.claims
        lookahead = self.lead  # never below runledger_lookahead (see _seconds_until_due)
        held_back = False
        if prepared is None and lookahead > 0:
            held_back = self.retention.running
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
            self._clock_offset = result.clock_offset
        if prepared is None:
            self._contended = result.claimed == 0 and not held_back
        if self.metrics.enabled:
            self.metrics.fired("skipped", result.skipped)
            self.metrics.fired("deferred", result.deferred)
        if result.fires:
            self._add_prepared(result.fires)
        if self.prepared is not None:
            self._prepared_fires += len(result.fires)
            self._prepared_seconds += time.monotonic() - began
        if self.prepared is None:
            claims.conn.commit()  # nothing waits: end the claim's transaction now
        elif time.time() >= self.prepared.commit_at:
            self._commit_prepared()
        return result.claimed

    def _commit_imminent(self) -> bool:
        """Whether the prepared group commits within 100 ms (bookkeeping waits until after it)."""
        return self.prepared is not None and self.prepared.commit_at - time.time() < 0.1

    def _add_prepared(self, fires: list[Fire]) -> None:
        """Keep fires recorded ahead: built, up to MAX_PREPARED; past that parked or by id (spill.py)."""
        room = max(0, MAX_PREPARED - (len(self.prepared.outgoing) if self.prepared is not None else 0))
        outgoing = self.dispatcher.prepare(fires[:room], encode=not self.broker_backoff.failing)
        instants = [f.scheduled_for for f in fires if f.scheduled_for is not None]
        first, last = min(instants), max(instants)
        if self.prepared is None:
            self.prepared = Prepared(first, self._local(first), outgoing, last)
        else:
            self.prepared.outgoing.extend(outgoing)
            self.prepared.commit_at = min(self.prepared.commit_at, self._local(first))
            self.prepared.last = max(self.prepared.last, last)
        # Picked out now, not at the instant: the commit then checks only these (usually none).
        self.prepared.overlap += [f for f in fires if f.overlap_skip or f.overlap_policy != "allow"]
        rest = fires[room:]
        if rest:
            self._spill(self.prepared, rest)

    def _spill(self, prepared: Prepared, fires: list[Fire]) -> None:
        """Park the fires encoded on a fast path; keep the others (any road) by id."""
        by_id = fires
        if not self.broker_backoff.failing and self.dispatcher.road() in ("amqp", "redis"):
            by_id = []
            for item in self.dispatcher.prepare(fires):
                if item.frames is None and not item.pushes:
                    by_id.append(item.fire)  # its message could not be built now: tried again after the commit
                    continue
                if prepared.parked is None:
                    prepared.parked = SpillFile()
                prepared.parked.add(item)
        if not by_id:
            return
        for fire in by_id:
            prepared.spilled.add(fire.id)
        low, high = min(f.scheduled_for for f in by_id), max(f.scheduled_for for f in by_id)
        known = prepared.spilled_range
        prepared.spilled_range = (min(low, known[0]), max(high, known[1])) if known else (low, high)

    def _local(self, instant: datetime) -> float:
        """The local wall-clock time at which the database clock reads ``instant`` (never early)."""
        return instant.timestamp() - self._clock_offset

    def _commit_prepared(self) -> None:
        """Commit the open transaction at its instant and publish what is due; hold the rest.

        Cyclic garbage collection is off meanwhile: an instant's objects are acyclic (reference counting
        frees them), and a collection over beat's whole heap in the middle of a burst costs more than the burst.
        """
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            self._commit_and_publish()
        finally:
            if was_enabled:
                gc.enable()

    def _commit_and_publish(self) -> None:
        prepared, self.prepared = self.prepared, None
        assert prepared is not None
        self._learn_rate()
        claims = self.claims
        skipped = skip_overlapping(claims, prepared.overlap)
        cancelled = cancel_overlapped(claims, prepared.overlap)
        claims.conn.commit()
        self.after_commit()
        if cancelled:
            self._revoke(cancelled)
        if skipped:
            self.metrics.fired("skipped", len(skipped))
            log.info("runledger: held back %d fire(s) (skipped or buffered): previous run still queued or running",
                     len(skipped))
        outgoing, prepared.outgoing = prepared.outgoing, []  # each fire is let go once confirmed
        if prepared.parked is not None or prepared.spilled:
            self._publish_spilled(prepared, outgoing, skipped)
        else:
            self._release(outgoing, skipped, prepared.last)

    def _publish_spilled(self, prepared: Prepared, outgoing: list[Outgoing], skipped: set[uuid.UUID]) -> None:
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
                self._release(outgoing, skipped, prepared.last)
                outgoing.clear()
                if prepared.parked is not None:
                    with contextlib.closing(prepared.parked) as parked:
                        for chunk in parked.chunks(SPILL_CHUNK):
                            self._hold_publishing()
                            self._release(chunk, skipped, prepared.last)
                if prepared.spilled:
                    self._read_back(prepared)
            self._settle(wait=True)

    @contextlib.contextmanager
    def _publishing_lock(self) -> Iterator[None]:
        """The publishing lock for the block: taken now if it can be (else before a later chunk, see
        ``_hold_publishing``), released at the end if it was taken."""
        ledger = self.ledger  # the session that takes the lock is the one to release it
        self._publishing_held = False
        try:
            self._hold_publishing()
            yield
        finally:
            if self._publishing_held:
                self._publishing_held = False
                with contextlib.suppress(psycopg.Error):  # a broken session has dropped the lock already
                    ledger.release_publishing()

    @contextlib.contextmanager
    def _marks_deferred(self) -> Iterator[None]:
        """No ledger marks are written during the block (``_settle`` keeps them for after it)."""
        self._holding_marks = True
        try:
            yield
        finally:
            self._holding_marks = False

    def _hold_publishing(self) -> None:
        """Take the publishing lock, unless held already: at the commit, then before each chunk, since a sweep in
        progress at the commit keeps it for its transaction (that sweep takes only rows older than the instant's)."""
        if not self._publishing_held:
            with contextlib.suppress(psycopg.Error):  # without the ledger, publishing goes on: marks will fail anyway
                self._publishing_held = self.ledger.hold_publishing()

    def _read_back(self, prepared: Prepared) -> None:
        """Each chunk is read on the claims connection (idle between transactions now) by a helper thread while
        this one builds and writes the chunk before it."""
        ids = prepared.spilled
        assert prepared.spilled_range is not None
        first, last = prepared.spilled_range
        claims = self.claims
        step = SPILL_CHUNK

        def read(start: int) -> list[Fire]:
            try:
                return [Fire(fid, sid, name, job_type, payload, options or {}, at)
                        for fid, sid, name, job_type, payload, options, at
                        in claims.read_spilled(ids.slice(start, start + step), first, last)]
            finally:
                claims.conn.rollback()  # end the read's transaction

        with ThreadPoolExecutor(1, thread_name_prefix="runledger-read-back") as reader:
            pending = reader.submit(read, 0)
            for start in range(0, len(ids), step):
                fires = pending.result()
                self._hold_publishing()
                if start + step < len(ids):
                    pending = reader.submit(read, start + step)
                self._release(self.dispatcher.prepare(fires, encode=not self.broker_backoff.failing), set(), last)

    def _release(self, outgoing: list[Outgoing], skipped: set[uuid.UUID], last: datetime) -> None:
        """Publish the committed fires due now; hold those of a later instant, drop those held back."""
        now = time.time()
        if self._local(last) <= now and not skipped:  # the usual case: one instant, all due
            self._publish(outgoing, wait=False)
            return
        due = []
        for item in outgoing:
            if item.fire.id in skipped:
                continue
            at = self._local(item.fire.scheduled_for) if item.fire.scheduled_for else now
            if at <= now:
                due.append(item)
            else:
                self._held_seq += 1
                bisect.insort(self._held, (at, self._held_seq, item))
        self._publish(due, wait=False)

    def _revoke(self, cancelled: list[dict[str, Any]]) -> None:
        """cancel_other: revoke the runs a later fire replaced (already revoked in the ledger)."""
        for terminate in (False, True):
            ids = [str(c["id"]) for c in cancelled if bool(c["terminate"]) is terminate]
            if not ids:
                continue
            log.info("runledger: cancel_other revoking %d run(s)%s", len(ids), " (terminate)" if terminate else "")
            try:
                self.app.control.revoke(ids, terminate=terminate)
            except Exception as exc:  # the ledger already says revoked; the worker's guard stops unstarted runs
                log.warning("runledger: revoking %s failed: %s", ", ".join(ids), safe_error(exc))

    def _publish_held(self) -> None:
        cut = bisect.bisect_right(self._held, (time.time(), float("inf")))
        if cut:
            due = [item for _, _, item in self._held[:cut]]
            del self._held[:cut]
            self._publish(due, wait=False)

    def _beat_tick(self) -> None:
        """Refresh this beat's row (at most once per BEAT_TICK_EVERY, on the autocommit ledger connection,
        after the fires are settled, so it never delays a commit); prune beats silent for an hour."""
        now = time.monotonic()
        if now < self._next_beat_tick or not self._beats_table:
            return
        self._next_beat_tick = now + BEAT_TICK_EVERY
        try:
            self.ledger.beat_tick(self.beat_id, self._host, os.getpid(), __version__,
                                  self.prepared is not None, BEAT_STALE_AFTER)
            self._beat_row = True
        except (psycopg.errors.UndefinedTable, psycopg.errors.InsufficientPrivilege) as exc:
            self._beats_table = False  # never let bookkeeping stop the scheduling
            log.warning("runledger: cannot keep this beat's row in %s.beats (%s; run `runledger-beat migrate` or "
                        "`runledger-beat doctor`); it stays invisible to `beats` and `health`",
                        self.settings.schema, safe_error(exc))

    def _refresh_metrics(self) -> None:
        """Mark the tick; every GAUGE_REFRESH seconds read the gauges (one statement, ledger connection)."""
        self.metrics.ticked()
        now = time.monotonic()
        if now >= self._next_gauges:
            self._next_gauges = now + metrics_module.GAUGE_REFRESH
            try:
                self.metrics.gauges(**self.ledger.operation_gauges())
            except psycopg.OperationalError:
                raise  # the connection is gone: run_once starts afresh
            except psycopg.Error as exc:  # a refused statement (privileges, say): the gauges go stale, no more
                log.warning("runledger: reading the metrics gauges failed: %s", safe_error(exc))

    def _observe_sent(self, instants: list[datetime | None], confirmed_at: float) -> None:
        """Count confirmed fires and observe their lag from their instant to ``confirmed_at`` (local clock,
        converted to the database's)."""
        self.metrics.fired("sent", len(instants))
        now = confirmed_at + self._clock_offset
        for instant in instants:
            if instant is not None:
                self.metrics.lag(now - instant.timestamp())

    def _wait_for(self, due: float | None) -> float:
        """Seconds to sleep: until the next held fire, the prepared commit, or the next cursor."""
        cap = self.max_wait
        if not self.settings.listen:
            cap = min(cap, self.settings.poll_interval)
        if self.broker_backoff.active and self._backlog:
            cap = min(cap, max(0.0, self.broker_backoff.until - time.monotonic()))
        now = time.time()
        if self._held:
            cap = min(cap, max(self._held[0][0] - now, 0.0) + WAKE_MARGIN)
        if self.prepared is not None:
            return 0.0 if self._claims_left else max(0.0, min(cap, self.prepared.commit_at - now + WAKE_MARGIN))
        if due is None:
            return cap
        if due <= 0 and self.retention.running:
            # The retention drops hold this beat's preparing back (_record_batch): look again shortly, and at
            # the instant at the latest.
            return max(0.0, min(cap, RETENTION_POLL, due + self.lead + WAKE_MARGIN))
        if self._contended and due <= 0:
            # Every row in the window is locked by another beat, which fires it at its
            # instant; look again then (sooner if it is already past: that beat may be gone).
            due = max(due + self.settings.lookahead, CONTENDED_RETRY)
        return max(0.0, min(cap, due + WAKE_MARGIN))

    # -- publishing --------------------------------------------------------------------

    def _publish(self, outgoing: list[Outgoing], wait: bool = True) -> None:
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
        self._settle(wait)

    def _log_sending(self, outgoing: list[Outgoing]) -> None:
        names = ": " + ", ".join(o.fire.schedule_name or o.fire.job_type for o in outgoing) \
            if len(outgoing) <= 3 else ""
        first = min((o.fire.scheduled_for for o in outgoing if o.fire.scheduled_for), default=None)
        late = f" ({1000 * (time.time() - self._local(first)):.0f} ms after the instant)" if first else ""
        log.info("runledger: sending %d fire(s)%s%s", len(outgoing), names, late)

    def _settle(self, wait: bool = True, timeout: float = CONFIRM_TIMEOUT) -> None:
        """Mark sent what the broker confirmed; keep failed fires pending (and in memory on an outage).

        While fires are still in flight the marks wait (without ``wait``): the UPDATEs would take the
        database's share of the machine from the broker mid-burst. They are made once nothing is in flight,
        at the latest at the next settle that waits (every pass of the loop ends with one); while an instant
        bigger than beat holds goes out, after its last chunk (``_publish_spilled``).
        """
        result = self.dispatcher.collect(wait, timeout)
        if result.sent:
            if self._backlog:
                for fire_id in result.sent:
                    self._backlog.pop(fire_id, None)
            self.after_publish()
            self._to_mark.extend(result.sent)
            if self.metrics.enabled:
                self._observe_sent([self._instants.pop(fire_id, None) for fire_id in result.sent], time.time())
        if len(self._to_mark) and not self._holding_marks and (wait or not self.dispatcher.in_flight()):
            to_mark, self._to_mark = self._to_mark, PackedIds()
            for start in range(0, len(to_mark), MARK_CHUNK):
                self.ledger.mark_sent(to_mark.slice(start, start + MARK_CHUNK))
        if result.error is not None:
            self.broker_backoff.failed(safe_error(result.error))
        elif result.sent:
            self.broker_backoff.succeeded()
        by_reason: dict[str, list[Fire]] = defaultdict(list)
        for fire, reason in result.failed:
            by_reason[reason].append(fire)
        for reason, fires in by_reason.items():
            self._keep(fires, reason, backlog=result.error is not None)

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
                if len(self._backlog) < MAX_BACKLOG and not is_parked(fire):  # a parked one waits for the sweep
                    self._backlog[fire.id] = fire
            self.ledger.note_publish_outage(ids, error)
            return
        for fire in fires:
            self._backlog.pop(fire.id, None)
        dead = self.ledger.mark_publish_failed(ids, error, self.settings.max_publish_attempts)
        if self.metrics.enabled:
            self.metrics.fired("failed", len(fires))
        log.warning("runledger: publishing %d fire(s) failed (%s); %s", len(fires), error,
                    f"{len(dead)} reached {self.settings.max_publish_attempts} attempts and are marked failed"
                    if dead else "the recovery sweep will retry")

    def _publish_backlog(self) -> None:
        if self._backlog and not self.broker_backoff.active:
            self._publish([Outgoing(f) for f in list(self._backlog.values())])

    def sweep_soon(self) -> None:
        """Sweep the outbox at the next step (rows were queued to publish at once: backfill, manual trigger)."""
        self._next_sweep = 0.0

    def _sweep(self) -> None:
        """Republish ledger rows left pending past the grace (a crashed beat, a failed publish); mark lost runs."""
        self._next_sweep = time.monotonic() + max(1.0, min(self.settings.recovery_grace / 2, 10.0))
        ledger = self.ledger
        if time.monotonic() >= self._next_prune:
            self._prune_audit(ledger)
        lost = ledger.mark_lost_runs(self.settings.lost_after)
        if lost:
            log.warning("runledger: marked %d run(s) lost (started, never finished)", len(lost))
        resolved = ledger.resolve_stale_sent(self.settings.lost_after)
        if resolved:
            expired = sum(1 for r in resolved if r["status"] == "expired")
            log.warning("runledger: %d sent fire(s) expired before a worker took them, %d never started (lost)",
                        expired, len(resolved) - expired)
        self._warn_without_hook(ledger)
        if self.broker_backoff.active:
            return
        released = self.ledger.release_buffered()  # buffer_one fires whose live run ended unseen by a worker hook
        if released:
            log.info("runledger: released %d buffered fire(s)", len(released))
        waiting = {item.fire.id for _, _, item in self._held}
        with self._ledger.transaction():
            grace = self.settings.recovery_grace
            if not self.ledger.sweep_lock():  # a beat is publishing a big instant: its rows are not abandoned
                grace *= BUSY_GRACE_FACTOR
            rows = self.ledger.claim_pending(grace, SWEEP_LIMIT)
            fires = [Fire.from_job(r) for r in rows if r["id"] not in self._backlog and r["id"] not in waiting]
            if fires:
                log.info("runledger: recovery sweep republishing %d fire(s)", len(fires))
                self._publish([Outgoing(f) for f in fires])

    def _prune_audit(self, ledger: Store) -> None:
        """Drop audit entries past runledger_retention (the ledger's), hourly; a role without the right to only
        logs it."""
        self._next_prune = time.monotonic() + PRUNE_EVERY
        if self.settings.retention is None:
            return
        try:
            ledger.prune_audit(self.settings.retention)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("runledger: cannot prune %s.schedule_changes (%s); grant DELETE on it to beat's role",
                        self.settings.schema, safe_error(exc))

    def _maintain_ledger(self, ledger: Store) -> None:
        """Day partitions made ahead: at start, then hourly, a minute on when a lock was busy; only between
        instants (a prepared transaction's locks would make the DDL wait). Days past runledger_retention are
        dropped by ``self.retention`` in the background."""
        self._next_ledger = time.monotonic() + LEDGER_EVERY
        try:
            done = ledger.maintain_ledger(None)
        except psycopg.errors.InsufficientPrivilege as exc:
            log.warning("runledger: cannot maintain the ledger's partitions (%s); grant EXECUTE ON FUNCTION "
                        "%s.runledger_maintain_ledger(interval, integer) to beat's role (see `runledger-beat grants "
                        "beat`)", safe_error(exc), self.settings.schema)
            return
        if log_partitions(done, LEDGER_RETRY):
            self._next_ledger = time.monotonic() + LEDGER_RETRY

    def _warn_without_hook(self, ledger: Store) -> None:
        """Warn (hourly) when sent fires stay unstarted and no worker runs the ledger hook."""
        if time.monotonic() < self._next_hook_warning:
            return
        self._next_hook_warning = time.monotonic() + HOOK_WARNING_EVERY
        waiting = ledger.unresolved_sent_without_hook(HOOK_WARNING_AFTER)
        if waiting:
            log.warning("runledger: %d fire(s) were sent over %.0f s ago and no worker has reported the ledger hook "
                        "within the hour; add runledger_beat.install(app) to the workers' Celery app so the ledger "
                        "follows runs (until then their status stays 'sent')", waiting, HOOK_WARNING_AFTER)

    # -- shutdown ------------------------------------------------------------------------

    def close(self, drain_timeout: float | None = None) -> None:
        """Publish committed fires still held (at their instants, waiting at most ``drain_timeout`` s,
        by default the lookahead plus one second), roll back the prepared group, release everything."""
        limit = self.settings.lookahead + 1.0 if drain_timeout is None else drain_timeout
        deadline = time.time() + limit
        try:
            while self._held and self.connected and time.time() < deadline:
                time.sleep(max(0.0, min(self._held[0][0] - time.time(), deadline - time.time())))
                self._publish_held()
            if self._held:
                log.warning("runledger: %d committed fire(s) not published at shutdown; the recovery sweep "
                            "of any beat publishes them", len(self._held))
            if self.connected:
                self._settle(wait=True, timeout=SHUTDOWN_CONFIRM_TIMEOUT)
            if self.connected and self._beat_row:
                self.ledger.beat_remove(self.beat_id)
                self._beat_row = False
        except Exception as exc:  # shutting down: whatever failed, the recovery sweep republishes
            log.warning("runledger: shutdown could not publish everything (%s); the recovery sweep will",
                        safe_error(exc, self.settings.dsn))
        self._held = []
        self._instants.clear()
        self.close_connections()
        self.retention.join(RETENTION_JOIN_TIMEOUT)
        self.dispatcher.close()
        self.metrics.close()
