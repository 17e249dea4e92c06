"""The Celery glue: ``celery beat -S runledger_beat.Scheduler``.

Each tick claims due schedules in Postgres, records fires in the ledger in the
same transaction that advances the cursors, commits, then publishes the fires
(task_id = ledger id) and marks them sent. Any number of beats may run: rows are
claimed with ``FOR UPDATE SKIP LOCKED`` and a unique index guards each slot.
Between ticks beat sleeps until the earliest cursor, woken at once by
LISTEN/NOTIFY when schedules change.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

import psycopg
from celery import beat

from . import queries
from .db import ConfigError, connect, migrate, redact_dsn, safe_error, schema_ready
from .dispatch import Dispatcher, PublishError
from .materialize import Fire, run_pass
from .settings import Settings, dsn_from, load
from .worker import mark_lost_runs

log = logging.getLogger("runledger_beat.scheduler")

NOTIFY_CHANNEL = "runledger_schedules"
#: Passes run back to back in one tick while batches come back full.
MAX_PASSES_PER_TICK = 100
#: Fires a beat keeps in memory to republish itself after a broker outage.
MAX_BACKLOG = 100_000
#: Waking a hair after the cursor avoids a spin when clocks round down.
WAKE_MARGIN = 0.002


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


class Scheduler(beat.Scheduler):
    """A Celery beat scheduler whose schedules and fires live in Postgres."""

    #: Beat's liveness ping wants a tick at least this often.
    max_interval = 5.0

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.settings: Settings | None = None
        self._conn: psycopg.Connection | None = None
        self._listen: psycopg.Connection | None = None
        self._listen_ok = True
        self._broker: Any = None
        self._producer: Any = None
        self._backlog: dict[Any, Fire] = {}
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
            self._conn = self._connect()
            self._prepare_schema(self._conn)
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

    def _connect(self) -> psycopg.Connection:
        assert self.settings is not None
        return connect(self.settings.dsn, self.settings.schema, application_name="runledger_beat")

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
        report = sync_beat_schedule(self._conn, self.app, entries)
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
        """Run due work, then wait (woken by NOTIFY) until the next fire; return what is left to sleep."""
        wait = self.run_once()
        if wait > 0 and self._listen is not None:
            started = time.monotonic()
            if self._wait_for_change(wait):
                return 0.0
            return max(0.0, wait - (time.monotonic() - started))
        return wait

    def run_once(self) -> float:
        """One tick's work without sleeping; returns the seconds until work is next due."""
        if self.settings is None:
            return self.max_interval
        if self._db_backoff.active:
            return min(self._db_backoff.until - time.monotonic(), self.max_interval)
        try:
            if self._conn is None or self._conn.closed:
                self._conn = self._connect()
                self._open_listener()
            self._publish_backlog()
            for _ in range(MAX_PASSES_PER_TICK):
                result = run_pass(self._conn, self.settings.batch_size, self.settings.defer_seconds)
                self._db_backoff.succeeded()
                if result.fires:
                    self._after_commit_fault()
                    self._publish(result.fires)
                if result.claimed < self.settings.batch_size:
                    break
            if time.monotonic() >= self._next_sweep:
                self._sweep()
            due = self._conn.execute(queries.next_due_in).fetchone()["seconds"]
            self._conn.commit()
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._drop_db()
            return min(self._db_backoff.failed(safe_error(exc, self.settings.dsn)), self.max_interval)
        return self._wait_for(due)

    def _wait_for(self, due: float | None) -> float:
        assert self.settings is not None
        cap = self.max_interval
        if self._listen is None:
            cap = min(cap, self.settings.poll_interval)
        if self._backlog:
            cap = min(cap, max(self._broker_backoff.until - time.monotonic(), 0.05))
        cap = min(cap, max(self._next_sweep - time.monotonic(), 0.0))
        if due is None:
            return cap
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

    def _ensure_producer(self) -> Any:
        if self._producer is None:
            conn = self.app.connection_for_write()
            conn.ensure_connection(max_retries=1)
            self._broker = conn
            self._producer = self.app.amqp.Producer(conn, auto_declare=False)
        return self._producer

    def _publish(self, fires: list[Fire]) -> None:
        """Publish committed fires and mark them sent; on broker failure keep them for later."""
        if self._broker_backoff.active:
            self._keep(fires, "broker unavailable")
            return
        sent, error = self._send(fires)
        if error is None:
            self._broker_backoff.succeeded()
        else:
            self._broker_failed(error)
            self._keep(fires[len(sent):], safe_error(error))
        if sent:
            for fire_id in sent:
                self._backlog.pop(fire_id, None)
            if self.settings and self.settings.fault_point == "after_publish":
                os.kill(os.getpid(), signal.SIGKILL)
            with self._conn.transaction():
                self._conn.execute(queries.mark_sent, {"ids": sent})
            log.info("runledger: sent %d fire(s)%s", len(sent),
                     "" if len(sent) > 3 else ": " + ", ".join(f.schedule_name or f.job_type for f in fires[:len(sent)]))

    def _send(self, fires: list[Fire]) -> tuple[list, BaseException | None]:
        """Publish fires in order; return the ids sent and the error that stopped the rest, if any."""
        try:
            return self.dispatcher.publish(self._ensure_producer(), fires), None
        except PublishError as exc:
            return exc.sent, exc.error
        except Exception as exc:  # connecting to the broker failed
            return [], exc

    def _broker_failed(self, error: BaseException) -> None:
        self._broker_backoff.failed(safe_error(error))
        self._release_broker()

    def _keep(self, fires: list[Fire], error: str) -> None:
        if not fires:
            return
        for fire in fires:
            if len(self._backlog) < MAX_BACKLOG:
                self._backlog[fire.id] = fire
        with self._conn.transaction():
            self._conn.execute(queries.mark_publish_failed, {"ids": [f.id for f in fires], "error": error[:1000]})

    def _publish_backlog(self) -> None:
        if self._backlog and not self._broker_backoff.active:
            self._publish(list(self._backlog.values()))

    def _sweep(self) -> None:
        """Republish ledger rows left pending past the grace (a crashed beat, a failed publish)."""
        assert self.settings is not None
        self._next_sweep = time.monotonic() + max(1.0, min(self.settings.recovery_grace / 2, 10.0))
        with self._conn.transaction():
            mark_lost_runs(self._conn, self.settings.lost_after)
        if self._broker_backoff.active:
            return
        with self._conn.transaction():
            rows = self._conn.execute(queries.claim_pending_jobs,
                                      {"grace": self.settings.recovery_grace, "limit": 1000}).fetchall()
            fires = [Fire(r["id"], r["schedule_id"], r["schedule_name"], r["job_type"], r["payload"],
                          r["options"] or {}, r["scheduled_for"])
                     for r in rows if r["id"] not in self._backlog]
            if not fires:
                return
            log.info("runledger: recovery sweep republishing %d fire(s)", len(fires))
            sent, error = self._send(fires)
            if sent:
                self._conn.execute(queries.mark_sent, {"ids": sent})
            if error is not None:
                self._broker_failed(error)
                rest = [f.id for f in fires[len(sent):]]
                self._conn.execute(queries.mark_publish_failed, {"ids": rest, "error": safe_error(error)[:1000]})

    # -- shutdown -----------------------------------------------------------

    def _drop_db(self) -> None:
        for conn in (self._conn,):
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
        self._conn = None
        self._close_listener()

    def _close_listener(self) -> None:
        if self._listen is not None:
            try:
                self._listen.close()
            except Exception:
                pass
        self._listen = None

    def _release_broker(self) -> None:
        if self._broker is not None:
            try:
                self._broker.release()
            except Exception:
                pass
        self._broker = None
        self._producer = None

    def sync(self) -> None:
        """Nothing to sync: every change is committed as it happens."""

    def close(self) -> None:
        """Release the database and broker connections."""
        self._drop_db()
        self._release_broker()
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
