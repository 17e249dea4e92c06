"""The Celery glue: ``celery beat -S runledger_beat.Scheduler``.

Each tick claims due schedules in Postgres, records their fires in the ledger in
the same transaction that advances the cursors, commits, then publishes the
fires (task_id = ledger id) and marks them sent. Any number of beats may run:
rows are claimed with ``FOR UPDATE SKIP LOCKED`` and a unique index guards each
slot. Between ticks beat sleeps until the next thing to do, woken at once by
LISTEN/NOTIFY when schedules change.

Lookahead (``runledger_lookahead``, 2 s by default): the fires of the next
instant are recorded up to that long before it, in a transaction kept open
until the instant, and their messages are built and encoded meanwhile. At the
instant beat commits and writes the ready frames, so thousands of fires due in
the same second leave within a fraction of it. While the transaction is open
the schedule rows stay locked: a pause, edit or removal of such a schedule
waits for that fire (at most the lookahead) and applies from the next one. If
beat dies first, the transaction rolls back and the fire is claimed again, by
this beat after a restart or at once by another beat. Overlap-skip is judged
at commit, when the fire is really due.

With several beats, one at a time prepares ahead (a transaction-scoped
advisory lock), so an instant's burst has one publisher, which is how the broker
ingests it fastest; every beat claims rows already due, in parallel.

Three Postgres connections per beat: one for claims (it holds the open
transaction), one for ledger bookkeeping (sent marks, recovery sweep, lost
runs, next-due reads), one for LISTEN.
"""

from __future__ import annotations

import bisect
import logging
import os
import signal
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from celery import beat

from . import queries
from .db import ConfigError, connect, migrate, redact_dsn, safe_error, schema_ready
from .dispatch import Dispatcher, Outgoing
from .materialize import Fire, record_pass, skip_overlapping, try_prepare_lock
from .settings import Settings, dsn_from, load
from .worker import mark_lost_runs

log = logging.getLogger("runledger_beat.scheduler")

NOTIFY_CHANNEL = "runledger_schedules"
#: Passes run back to back in one tick while batches come back full.
MAX_PASSES_PER_TICK = 100
#: Fires a beat keeps in memory to republish itself after a broker outage.
MAX_BACKLOG = 100_000
#: Fires recorded ahead in one open transaction, at most (bounds memory).
MAX_PREPARED = 50_000
#: Waking a hair after an instant avoids a spin when clocks round down.
WAKE_MARGIN = 0.002
#: How soon to look again when due rows are locked by another beat.
CONTENDED_RETRY = 0.05


class Backoff:
    """Exponential back-off between reconnect attempts, with one log line per outage."""

    def __init__(self, what: str, first: float = 0.5, cap: float = 10.0) -> None:
        self.what, self.first, self.cap = what, first, cap
        self.delay = 0.0
        self.until = 0.0

    @property
    def active(self) -> bool:
        return self.delay > 0 and time.monotonic() < self.until

    @property
    def failing(self) -> bool:
        return self.delay > 0

    def failed(self, error: str) -> float:
        if self.delay == 0:
            log.warning("runledger: %s unavailable (%s); retrying with back-off", self.what, error)
        self.delay = min(self.cap, self.delay * 2 or self.first)
        self.until = time.monotonic() + self.delay
        return self.delay

    def succeeded(self) -> None:
        if self.delay:
            log.warning("runledger: %s reachable again", self.what)
        self.delay = 0.0


@dataclass
class _Group:
    """Fires recorded in the still-open claim transaction; committed at the first one's instant."""

    start: datetime          # the instant further claims of this transaction are cut to
    commit_at: float         # local wall-clock time of the earliest fire
    outgoing: list[Outgoing]
    last: datetime           # the latest fire's instant


class Scheduler(beat.Scheduler):
    """A Celery beat scheduler whose schedules and fires live in Postgres."""

    #: Beat's liveness ping wants a tick at least this often.
    max_interval = 5.0

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.settings: Settings | None = None
        self._conn: psycopg.Connection | None = None      # claims; holds the open transaction
        self._ledger: psycopg.Connection | None = None    # autocommit bookkeeping
        self._listen: psycopg.Connection | None = None
        self._listen_ok = True
        self._group: _Group | None = None
        self._held: list[tuple[float, int, Outgoing]] = []  # committed, waiting for their instant
        self._held_seq = 0
        self._backlog: dict[Any, Fire] = {}
        self._clock_offset = 0.0   # database clock minus local wall clock, in seconds
        self._contended = False    # the last claim found due rows all locked by other beats
        self._next_sweep = 0.0
        self._db_backoff = Backoff("Postgres")
        self._broker_backoff = Backoff("broker")
        self.dispatcher = Dispatcher(app)
        kwargs.pop("schedule_filename", None)
        super().__init__(app, *args, lazy=lazy, **kwargs)

    # -- set-up -----------------------------------------------------------

    def setup_schedule(self) -> None:
        """Check settings, connect, migrate, import beat_schedule; exit 1 with one line on failure."""
        try:
            self.settings = load(self.app.conf)
            self.dispatcher.send_sent_events = self.settings.send_sent_events
            self.dispatcher.fast = self.settings.fast_publish
            self._connect_all()
            self._prepare_schema(self._ledger)
            if self.settings.import_beat_schedule:
                self._import_beat_schedule()
        except ConfigError as exc:
            self._fatal(str(exc))
        except psycopg.Error as exc:
            where = redact_dsn(self.settings.dsn) if self.settings else "?"
            self._fatal(f"cannot use Postgres at {where}: {safe_error(exc, self.settings.dsn if self.settings else None)}")
        self._open_listener()

    def _fatal(self, message: str) -> None:
        log.error("runledger_beat: %s", message)
        self.close()
        raise SystemExit(1)

    def _connect_all(self) -> None:
        assert self.settings is not None
        self._conn = connect(self.settings.dsn, self.settings.schema, application_name="runledger_beat")
        self._ledger = connect(self.settings.dsn, self.settings.schema, autocommit=True,
                               application_name="runledger_beat.ledger")

    def _prepare_schema(self, conn: psycopg.Connection) -> None:
        assert self.settings is not None
        if self.settings.auto_migrate:
            applied = migrate(conn, self.settings.schema)
            if applied:
                log.info("runledger: applied migrations %s", ", ".join(applied))
        elif not schema_ready(conn, self.settings.schema):
            raise ConfigError(
                f"runledger_schema: schema {self.settings.schema!r} has no runledger tables and "
                "runledger_auto_migrate is off (run `runledger-beat migrate`)")

    def _import_beat_schedule(self) -> None:
        entries = self.app.conf.beat_schedule or {}
        if not entries:
            return
        from .importer import sync_beat_schedule
        report = sync_beat_schedule(self._ledger, self.app, entries)
        log.info("runledger: beat_schedule imported: %s", report)

    def _open_listener(self) -> None:
        assert self.settings is not None
        if not self.settings.listen or not self._listen_ok:
            return
        try:
            conn = connect(self.settings.dsn, self.settings.schema, autocommit=True,
                           application_name="runledger_beat.listen")
            conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
            self._listen = conn
        except psycopg.Error as exc:
            self._listen = None
            if not isinstance(exc, psycopg.OperationalError):
                self._listen_ok = False  # e.g. a transaction-mode pooler: poll instead
                log.warning("runledger: LISTEN unavailable (%s); polling every %ss",
                            safe_error(exc, self.settings.dsn), self.settings.poll_interval)

    # -- the loop ---------------------------------------------------------

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Run due work, then wait (woken by NOTIFY) until the next thing to do; return what is left to sleep."""
        wait = self.run_once()
        if wait > 0 and self._listen is not None:
            started = time.monotonic()
            if self._wait_for_change(wait):
                return 0.0
            return max(0.0, wait - (time.monotonic() - started))
        return wait

    def run_once(self) -> float:
        """One tick's work without sleeping; returns the seconds until there is work again."""
        if self.settings is None:
            return self.max_interval
        if self._db_backoff.active:
            return min(self._db_backoff.until - time.monotonic(), self.max_interval)
        try:
            if self._conn is None or self._conn.closed or self._ledger is None or self._ledger.closed:
                self._drop_db()
                self._connect_all()
                self._open_listener()
            self._publish_backlog()
            self._publish_held()
            if self._group is not None and time.time() >= self._group.commit_at:
                self._commit_group()
            self._record()
            self._settle(wait=True)  # every confirm in before beat sleeps
            if time.monotonic() >= self._next_sweep:
                self._sweep()
            due = None if self._group is not None else self._next_due()
            self._db_backoff.succeeded()
        except psycopg.Error as exc:  # lost connection, or a statement the server refused: start afresh
            self._drop_db()
            return min(self._db_backoff.failed(safe_error(exc, self.settings.dsn)), self.max_interval)
        return self._wait_for(due)

    def _record(self) -> None:
        """Claim and record fires: those due now are committed and published at once,
        those of the next instant within the lookahead wait in the open transaction."""
        assert self.settings is not None and self._conn is not None
        batch = self.settings.batch_size
        for _ in range(MAX_PASSES_PER_TICK):
            group = self._group
            if group is not None and len(group.outgoing) >= MAX_PREPARED:
                break
            lookahead = self.settings.lookahead
            if group is None and lookahead > 0 and not try_prepare_lock(self._conn):
                lookahead = 0.0  # another beat is preparing an instant: take only what is due
            result = record_pass(self._conn, batch, lookahead, group.start if group else None,
                                 self.settings.defer_seconds)
            if result.clock_offset is not None:
                self._clock_offset = result.clock_offset
            if group is None:
                self._contended = result.claimed == 0
            if result.fires:
                self._add_to_group(result.fires)
            if self._group is None:
                self._conn.commit()  # nothing waits: end the claim's transaction now
            elif time.time() >= self._group.commit_at:
                self._commit_group()
            if self.dispatcher.in_flight():
                self._settle(wait=False)  # mark sent what is confirmed while the next batch is recorded
            if result.claimed < batch:
                break

    def _add_to_group(self, fires: list[Fire]) -> None:
        outgoing = self.dispatcher.prepare(fires, encode=not self._broker_backoff.failing)
        instants = [f.scheduled_for for f in fires if f.scheduled_for is not None]
        first, last = min(instants), max(instants)
        if self._group is None:
            self._group = _Group(first, self._local(first), outgoing, last)
        else:
            self._group.outgoing.extend(outgoing)
            self._group.commit_at = min(self._group.commit_at, self._local(first))
            self._group.last = max(self._group.last, last)

    def _local(self, instant: datetime) -> float:
        """The local wall-clock time at which the database clock reads ``instant`` (never early)."""
        return instant.timestamp() - self._clock_offset

    def _commit_group(self) -> None:
        """Commit the open transaction at its instant and publish what is due; hold the rest."""
        group, self._group = self._group, None
        assert group is not None and self._conn is not None
        skipped = skip_overlapping(self._conn, [o.fire for o in group.outgoing])
        self._conn.commit()
        self._after_commit_fault()
        now = time.time()
        if self._local(group.last) <= now and not skipped:  # the usual case: one instant, all due
            due = group.outgoing
        else:
            due = []
            for item in group.outgoing:
                if item.fire.id in skipped:
                    continue
                at = self._local(item.fire.scheduled_for) if item.fire.scheduled_for else now
                if at <= now:
                    due.append(item)
                else:
                    self._held_seq += 1
                    bisect.insort(self._held, (at, self._held_seq, item))
        if skipped:
            log.info("runledger: skipped %d fire(s): previous run still queued or running", len(skipped))
        self._publish(due, wait=False)

    def _publish_held(self) -> None:
        now = time.time()
        cut = bisect.bisect_right(self._held, (now, float("inf")))
        if cut:
            due = [item for _, _, item in self._held[:cut]]
            del self._held[:cut]
            self._publish(due, wait=False)

    def _next_due(self) -> float | None:
        assert self.settings is not None and self._ledger is not None
        row = self._ledger.execute(queries.next_due_in, {"lookahead": float(self.settings.lookahead)}).fetchone()
        return row["seconds"]

    def _wait_for(self, due: float | None) -> float:
        assert self.settings is not None
        cap = self.max_interval
        if self._listen is None:
            cap = min(cap, self.settings.poll_interval)
        if self._backlog:
            cap = min(cap, max(self._broker_backoff.until - time.monotonic(), 0.05))
        cap = min(cap, max(self._next_sweep - time.monotonic(), 0.0))
        now = time.time()
        if self._held:
            cap = min(cap, max(self._held[0][0] - now, 0.0) + WAKE_MARGIN)
        if self._group is not None:
            return max(0.0, min(cap, self._group.commit_at - now + WAKE_MARGIN))
        if due is None:
            return cap
        if self._contended and due <= 0:
            # Every row in the window is locked by another beat, which fires it at its
            # instant; look again then (sooner if it is already past: that beat may be gone).
            due = max(due + self.settings.lookahead, CONTENDED_RETRY)
        return max(0.0, min(cap, due + WAKE_MARGIN))

    def _wait_for_change(self, timeout: float) -> bool:
        """Block up to ``timeout`` s on the LISTEN connection; True if schedules changed."""
        try:
            changed = False
            for _ in self._listen.notifies(timeout=timeout, stop_after=1):
                changed = True
            if changed:
                for _ in self._listen.notifies(timeout=0):
                    pass
            return changed
        except (psycopg.OperationalError, psycopg.InterfaceError):
            self._close_listener()
            return True

    def _after_commit_fault(self) -> None:
        if self.settings and self.settings.fault_point == "after_commit":
            os.kill(os.getpid(), signal.SIGKILL)

    # -- publishing ---------------------------------------------------------

    def _publish(self, outgoing: list[Outgoing], wait: bool = True) -> None:
        """Publish committed fires; with ``wait`` settle them too (else the next settle does)."""
        if not outgoing:
            return
        if self._broker_backoff.active:
            self._keep([o.fire for o in outgoing], "broker unavailable", backlog=True)
            return
        if log.isEnabledFor(logging.INFO):
            names = ": " + ", ".join(o.fire.schedule_name or o.fire.job_type for o in outgoing) \
                if len(outgoing) <= 3 else ""
            first = min((o.fire.scheduled_for for o in outgoing if o.fire.scheduled_for), default=None)
            late = f" ({1000 * (time.time() - self._local(first)):.0f} ms after the instant)" if first else ""
            log.info("runledger: sending %d fire(s)%s%s", len(outgoing), names, late)
        self.dispatcher.send(outgoing)
        self._settle(wait)

    def _settle(self, wait: bool = True) -> None:
        """Mark sent what the broker confirmed; keep failed fires pending (and in memory on an outage)."""
        result = self.dispatcher.collect(wait)
        if result.sent:
            for fire_id in result.sent:
                self._backlog.pop(fire_id, None)
            if self.settings and self.settings.fault_point == "after_publish":
                os.kill(os.getpid(), signal.SIGKILL)
            self._ledger.execute(queries.mark_sent, {"ids": result.sent})
        if result.error is not None:
            self._broker_backoff.failed(safe_error(result.error))
        elif result.sent:
            self._broker_backoff.succeeded()
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
        if backlog:
            for fire in fires:
                if len(self._backlog) < MAX_BACKLOG:
                    self._backlog[fire.id] = fire
        else:
            for fire in fires:
                self._backlog.pop(fire.id, None)
            log.warning("runledger: publishing %d fire(s) failed (%s); the recovery sweep will retry",
                        len(fires), error)
        self._ledger.execute(queries.mark_publish_failed, {"ids": [f.id for f in fires], "error": error[:1000]})

    def _publish_backlog(self) -> None:
        if self._backlog and not self._broker_backoff.active:
            self._publish([Outgoing(f) for f in list(self._backlog.values())])

    def _sweep(self) -> None:
        """Republish ledger rows left pending past the grace (a crashed beat, a failed publish); mark lost runs."""
        assert self.settings is not None and self._ledger is not None
        self._next_sweep = time.monotonic() + max(1.0, min(self.settings.recovery_grace / 2, 10.0))
        with self._ledger.transaction():
            mark_lost_runs(self._ledger, self.settings.lost_after)
        if self._broker_backoff.active:
            return
        waiting = {item.fire.id for _, _, item in self._held}
        with self._ledger.transaction():
            rows = self._ledger.execute(queries.claim_pending_jobs,
                                        {"grace": self.settings.recovery_grace, "limit": 1000}).fetchall()
            fires = [Fire(r["id"], r["schedule_id"], r["schedule_name"], r["job_type"], r["payload"],
                          r["options"] or {}, r["scheduled_for"])
                     for r in rows if r["id"] not in self._backlog and r["id"] not in waiting]
            if fires:
                log.info("runledger: recovery sweep republishing %d fire(s)", len(fires))
                self._publish([Outgoing(f) for f in fires])

    # -- shutdown -----------------------------------------------------------

    def _drop_db(self) -> None:
        """Close the database connections; an open transaction rolls back, so its fires are claimed again."""
        if self._group is not None:
            log.warning("runledger: %d fire(s) recorded ahead rolled back; they will be claimed again",
                        len(self._group.outgoing))
        self._group = None
        for conn in (self._conn, self._ledger):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
        self._conn = self._ledger = None
        self._close_listener()

    def _close_listener(self) -> None:
        if self._listen is not None:
            try:
                self._listen.close()
            except Exception:
                pass
        self._listen = None

    def sync(self) -> None:
        """Nothing to sync: every change is committed as it happens."""

    def close(self) -> None:
        """Release the database and broker connections."""
        self._drop_db()
        self.dispatcher.close()
        super().close()

    # -- what beat shows ----------------------------------------------------

    def get_schedule(self) -> dict:
        return {}

    def set_schedule(self, schedule: dict) -> None:
        pass

    schedule = property(get_schedule, set_schedule)

    @property
    def info(self) -> str:
        dsn = dsn_from(self.app.conf)
        schema = self.app.conf.get("runledger_schema") or "runledger"
        return f"runledger: {redact_dsn(dsn) if dsn else '(runledger_dsn not set)'} schema={schema}"
