"""The Celery glue: ``celery beat -S runledger_beat.Scheduler`` (or ``-S runledger``).

Celery's beat service constructs the scheduler, calls ``setup_schedule`` once,
then ``tick`` in a loop (sleeping what it returns), and ``close`` on shutdown.
Here: setup checks the settings, applies migrations and imports
``beat_schedule``; tick runs the fire pipeline (pipeline.py) and then waits on
LISTEN (listener.py) until the next thing to do. Any number of beats may run.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
from celery import beat

from ..db.connect import connect, schema_of
from ..db.migrate import migrate, schema_ready
from ..db.redaction import redact_dsn, safe_error
from ..errors import ConfigError
from ..settings import Settings, check_broker, dsn_from, load
from .listener import ChangeListener
from .pipeline import FirePipeline

log = logging.getLogger(__name__)


class Scheduler(beat.Scheduler):
    """A Celery beat scheduler whose schedules and fires live in Postgres."""

    #: Beat's liveness ping wants a tick at least this often.
    max_interval = 5.0
    #: The fire pipeline class (a subclass may bring its own).
    pipeline_class = FirePipeline

    def __init__(self, app: Any, *args: Any, lazy: bool = False, **kwargs: Any) -> None:
        self.settings: Settings | None = None
        self.pipeline: FirePipeline | None = None
        self.listener: ChangeListener | None = None
        self._ticking = False         # a tick is under way (close() then only asks to stop: see close)
        self._stop_asked = False
        kwargs.pop("schedule_filename", None)
        try:
            # Before Celery's banner asks kombu for the broker's transport (it builds a lazy scheduler first).
            check_broker(app.conf)
        except ConfigError as exc:
            log.error("runledger_beat: %s", exc)  # nothing opened yet: nothing to close
            raise SystemExit(1) from None
        super().__init__(app, *args, lazy=lazy, **kwargs)

    def setup_schedule(self) -> None:
        """Check settings, connect, migrate, import beat_schedule; exit 1 with one line on failure."""
        try:
            self.settings = load(self.app.conf)
            with connect(self.settings.dsn, self.settings.schema, autocommit=True,
                         application_name="runledger_beat.setup", pool_mode=self.settings.pool_mode) as conn:
                self._prepare_schema(conn)
                if self.settings.import_beat_schedule:
                    self._import_beat_schedule(conn)
            self.pipeline = self.pipeline_class(self.app, self.settings, max_wait=self.max_interval)
            self.pipeline.connect()
        except ConfigError as exc:
            self._fatal(str(exc))
        except psycopg.Error as exc:
            dsn = self.settings.dsn if self.settings else None
            self._fatal(f"cannot use Postgres at {redact_dsn(dsn or '') or '?'}: {safe_error(exc, dsn)}")
        self.listener = ChangeListener(self.settings)
        self.listener.open()

    def _fatal(self, message: str) -> None:
        log.error("runledger_beat: %s", message)
        self.close()
        raise SystemExit(1)

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

    def _import_beat_schedule(self, conn: psycopg.Connection) -> None:
        entries = self.app.conf.beat_schedule or {}
        if entries:
            from ..importer import sync_beat_schedule
            report = sync_beat_schedule(conn, self.app, entries)  # each refused entry is logged as an error
            log.info("runledger: beat_schedule imported: %s", ", ".join(
                f"{k}={report[k]}" for k in ("created", "updated", "unchanged", "deactivated"))
                + (f", refused={sorted(report['refused'])}" if report["refused"] else ""))

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Run due work, then wait (woken by NOTIFY) until the next thing to do; return what is left to sleep."""
        self._ticking = True
        try:
            return self._tick()
        finally:
            self._ticking = False
            if self._stop_asked:
                raise SystemExit()  # beat's service catches it, then calls close() with no step half done

    def _tick(self) -> float:
        wait = self.run_once()
        if wait > 0 and self.listener is not None and self.listener.enabled:
            started = time.monotonic()
            if self.listener.wait(wait):
                if self.listener.take_outbox() and self.pipeline is not None:
                    self.pipeline.sweep_soon()
                return 0.0
            return max(0.0, wait - (time.monotonic() - started))
        return wait

    def run_once(self) -> float:
        """One tick's work without sleeping; returns the seconds until there is work again."""
        if self.pipeline is None:
            return self.max_interval
        return self.pipeline.run_once()

    def sync(self) -> None:
        """Nothing to sync: every change is committed as it happens."""

    def close(self) -> None:
        """Publish what is committed, roll back what is prepared, release every connection.

        Celery's SIGTERM/SIGINT handler calls this from inside whatever the main
        thread was doing, often a tick halfway through a statement: then it only
        asks the tick to stop, and the real close runs once the tick has unwound.
        """
        if self._ticking:
            self._stop_asked = True
            return
        if self.pipeline is not None:
            self.pipeline.close()
        if self.listener is not None:
            self.listener.close()
        super().close()

    def get_schedule(self) -> dict:
        """Beat's in-memory schedule is unused: the schedules live in Postgres."""
        return {}

    def set_schedule(self, schedule: dict) -> None:
        """Ignored (see get_schedule)."""

    schedule = property(get_schedule, set_schedule)

    @property
    def info(self) -> str:
        """The banner line: where the schedules are, never the password."""
        dsn = dsn_from(self.app.conf)
        try:
            schema = schema_of(dsn or "", self.app.conf.get("runledger_schema") or None)
        except ConfigError:
            schema = "(invalid)"
        return f"runledger: {redact_dsn(dsn) if dsn else '(runledger_dsn not set)'} schema={schema}"
