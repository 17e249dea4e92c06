"""Worker side of the run ledger: keep each ``jobs`` row current as its task runs.

Enable with one line in the Celery app module::

    runledger_beat.install(app)

Only messages carrying the ``runledger_id`` header (those beat publishes) are
tracked; every event is one cheap UPDATE on one connection per worker process,
opened lazily (after fork) and reopened after an error. A database problem is
logged and never fails the task. A lost connection, a read-only node (SQLSTATE
25006, a demoted primary) or an administrator's shutdown drops the connection and
the next attempt waits a back-off, then reconnects to whichever host of a
multi-host DSN (``target_session_attrs=read-write``) is primary now. With
``runledger_pool_mode`` (or RUNLEDGER_POOL_MODE) "transaction" the connection
prepares no statements (a transaction-mode pooler).

A message acts on a ledger row only when its task id equals the row id and the
``runledger_id`` header, and its task name equals the row's ``job_type`` (in
the SQL of every statement): a message of another task that names a row's id
changes nothing. With ``runledger_signing_key`` set (signing.py), only a
message whose ``runledger_sig`` verifies acts on the ledger; any other still
runs its task, and the process warns once.

Duplicate guard: a task class's ``__call__`` is wrapped so that, before the body
runs, the ledger row is claimed atomically (pending/sent/retry -> started). A
delivery whose row is already started or finished skips the body and is counted
in ``duplicates``. The wrapper is installed at app finalize and again in
``worker_init``/``celeryd_init`` (before prefork builds its tracers: the tracer
calls ``task(...)`` only when the class has a custom ``__call__``), and tracers
are rebuilt in ``worker_process_init`` for tasks registered late.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from . import signing
from .backoff import Backoff
from .db.connect import check_pool_mode, connect, schema_of
from .db.redaction import safe_error
from .db.worker_store import WorkerStore
from .errors import ConfigError
from .payload import LEDGER_HEADER
from .settings import dsn_from

log = logging.getLogger(__name__)

ERROR_LIMIT = 1000
#: Seconds between a worker process's reports that it runs the hook (runledger.workers).
REPORT_EVERY = 60.0
_WRAPPED = "_runledger_wrapped"
_DUPLICATE = "_runledger_duplicate"


class _Ledger:
    """One lazily opened autocommit connection per process."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.conn: psycopg.Connection | None = None
        self.pid = os.getpid()
        self.lock = threading.Lock()
        self._inherited: list[Any] = []  # connections of the parent, never closed here
        self._next_report = 0.0
        self._warned = False  # this process said once that a message was left off the ledger
        self.backoff = Backoff("the ledger database (worker)", first=0.5, cap=5.0)

    def reset_after_fork(self) -> None:
        # The parent's socket must not be closed (that would end its session), so keep
        # a reference and forget it.
        if self.conn is not None:
            self._inherited.append(self.conn)
        self.conn = None
        self.pid = os.getpid()
        self._next_report = 0.0
        self._warned = False

    def _connection(self) -> psycopg.Connection | None:
        if self.pid != os.getpid():
            self.reset_after_fork()
        if self.conn is not None and not self.conn.closed:
            return self.conn
        conf = self.app.conf
        dsn = dsn_from(conf)
        if not dsn:
            return None
        schema = schema_of(dsn, conf.get("runledger_schema") or None)
        self.conn = connect(dsn, schema, autocommit=True, application_name="runledger_worker",
                            pool_mode=check_pool_mode(conf.get("runledger_pool_mode")))
        return self.conn

    def run(self, step: Callable[[WorkerStore], Any]) -> Any:
        """Run ``step`` on the store; None when no DSN is set; on error log, drop the connection, raise
        _LedgerUnavailable (at once, without trying, while the database is in back-off after losing it)."""
        with self.lock:
            if self.backoff.active:
                raise _LedgerUnavailable()
            try:
                conn = self._connection()
                if conn is None:
                    return None
                store = WorkerStore(conn)
                if time.monotonic() >= self._next_report:
                    store.worker_seen(f"{socket.gethostname()}/{os.getpid()}", os.getpid())
                    self._next_report = time.monotonic() + REPORT_EVERY
                done = step(store)
                self.backoff.succeeded()
                return done
            except Exception as exc:
                error = safe_error(exc, dsn_from(self.app.conf))
                if _connection_lost(exc):  # the next attempt waits, then reconnects (to the primary now)
                    self.backoff.failed(error)
                else:
                    log.warning("runledger: ledger update failed (the task is unaffected): %s", error)
                self._drop()
                raise _LedgerUnavailable() from exc

    def row_of(self, request: Any, task: Any) -> tuple[str, str] | None:
        """(ledger id, task name) of the row this delivery may act on, or None: the ``runledger_id`` header must
        equal the task id and, with a signing key, ``runledger_sig`` must verify. The SQL matches the task name."""
        ledger_id = _ledger_id(request)
        name = getattr(task, "name", None)
        if not ledger_id or not isinstance(name, str):
            return None
        try:
            key = signing.app_key(self.app)
        except ConfigError as exc:
            self._warn_once("runledger: %s; the ledger is left alone until it is fixed", exc)
            return None
        if key is not None and not signing.verify(key, ledger_id, name, _header(request, signing.SIG_HEADER)):
            self._warn_once("runledger: a message for ledger row %s (task %s) carries no valid runledger_sig: its task "
                            "runs, the ledger is left alone (is runledger_signing_key the same for beat and the "
                            "workers?)", ledger_id, name)
            return None
        return ledger_id, name

    def _warn_once(self, message: str, *args: Any) -> None:
        if not self._warned:
            self._warned = True
            log.warning(message, *args)

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()


def _connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone or points at a node that cannot write any more: a lost
    connection, an administrator's shutdown (OperationalError), a read-only node (SQLSTATE 25006)."""
    return isinstance(exc, (psycopg.OperationalError, psycopg.InterfaceError,
                            psycopg.errors.ReadOnlySqlTransaction))


class _LedgerUnavailable(Exception):
    pass


def _header(request: Any, name: str) -> Any:
    """A message header as Celery hands it to the task: an attribute of the request, else in its headers."""
    value = getattr(request, name, None)
    if value is None:
        headers = getattr(request, "headers", None) or {}
        value = headers.get(name) if isinstance(headers, dict) else None
    return value


def _ledger_id(request: Any) -> str | None:
    """The ledger row this delivery names, or None.

    Only a message whose ``runledger_id`` header equals its task id is beat's:
    any other message could otherwise mark (and suppress) a row not its own.
    """
    if request is None:
        return None
    value = _header(request, LEDGER_HEADER)
    if not value or str(value) != str(getattr(request, "id", None)):
        return None
    return str(value)


def _error_text(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text[:ERROR_LIMIT]


def _update(ledger: _Ledger, step: Callable[[WorkerStore], Any]) -> None:
    with contextlib.suppress(_LedgerUnavailable):
        ledger.run(step)


def claim(ledger: _Ledger, ledger_id: str, task: str, worker: str | None, retries: int) -> bool:
    """Claim the row for this delivery; False only when it is a duplicate to suppress."""
    try:
        if ledger.run(lambda store: store.start_run(ledger_id, task, worker, int(retries or 0))) is not False:
            return True  # started, or no DSN configured
        status = ledger.run(lambda store: store.count_duplicate(ledger_id, task))
    except _LedgerUnavailable:
        return True  # database down: run the body normally
    if status is None:
        return True  # no ledger row: not ours to guard
    log.warning("runledger: duplicate delivery of %s suppressed (ledger status %s)", ledger_id, status)
    return False


def _is_duplicate(request: Any) -> bool:
    return bool(getattr(request, _DUPLICATE, False))


def _wrap_task_class(task: Any, ledger: _Ledger) -> None:
    cls = type(task)
    current = cls.__dict__.get("__call__")
    if current is not None and getattr(current, _WRAPPED, False):
        return
    from celery.app.trace import task_has_custom
    custom = cls.__call__ if task_has_custom(task, "__call__") else None

    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        request = self.request
        row = None if getattr(request, "called_directly", True) else ledger.row_of(request, self)
        if row and not claim(ledger, *row, getattr(request, "hostname", None), getattr(request, "retries", 0)):
            with contextlib.suppress(Exception):
                setattr(request, _DUPLICATE, True)
            return None
        if custom is not None:
            return custom(self, *args, **kwargs)
        if getattr(request, "called_directly", True):
            from celery.app.task import Task
            return Task.__call__(self, *args, **kwargs)
        return self.run(*args, **kwargs)

    setattr(__call__, _WRAPPED, True)
    __call__.__module__ = __name__
    cls.__call__ = __call__


def _wrap_all(app: Any, ledger: _Ledger) -> None:
    for task in list(app.tasks.values()):
        if task.name.startswith("celery."):
            continue
        try:
            _wrap_task_class(task, ledger)
        except Exception as exc:  # never break the worker over the guard
            log.warning("runledger: could not guard task %s: %s", task.name, exc)


class _Hooks:
    """The signal receivers of one app's ledger hook."""

    def __init__(self, app: Any, ledger: _Ledger) -> None:
        self.app, self.ledger = app, ledger

    def wrap_all(self, sender: Any = None, **_: Any) -> None:
        """At finalize and worker init: guard every task class."""
        _wrap_all(self.app, self.ledger)

    def process_init(self, sender: Any = None, **_: Any) -> None:
        """In each pool process: forget the parent's connection, report the hook, guard tasks registered late."""
        from celery.app.trace import build_tracer
        self.ledger.reset_after_fork()
        _update(self.ledger, lambda store: None)  # opens the connection, which reports this process
        for name, task in list(self.app.tasks.items()):
            current = type(task).__dict__.get("__call__")
            if name.startswith("celery.") or (current is not None and getattr(current, _WRAPPED, False)):
                continue
            _wrap_task_class(task, self.ledger)
            task.__trace__ = build_tracer(name, task, self.app.loader, sender, app=self.app)

    def prerun(self, sender: Any = None, task: Any = None, **_: Any) -> None:
        """Tasks the guard could not wrap still get their start recorded (unguarded)."""
        if task is None or getattr(type(task).__dict__.get("__call__"), _WRAPPED, False):
            return
        request = task.request
        row = self.ledger.row_of(request, task)
        if row:
            worker, retries = getattr(request, "hostname", None), int(getattr(request, "retries", 0) or 0)
            _update(self.ledger, lambda store: store.start_run(*row, worker, retries))

    def retry(self, sender: Any = None, request: Any = None, reason: Any = None, **_: Any) -> None:
        """A run asked to retry: count it, keep the reason."""
        row = self.ledger.row_of(request, sender)
        if not row:
            return
        exc = getattr(reason, "exc", None)
        error = _error_text(exc) if isinstance(exc, BaseException) else str(reason)[:ERROR_LIMIT]
        retries = int(getattr(request, "retries", 0) or 0) + 1
        _update(self.ledger, lambda store: store.mark_retry(*row, retries, error))

    def success(self, sender: Any = None, **_: Any) -> None:
        """A run succeeded (a suppressed duplicate changes nothing)."""
        request = getattr(sender, "request", None)
        row = self.ledger.row_of(request, sender)
        if row and not _is_duplicate(request):
            self._finish(row, lambda store: store.mark_success(*row))

    def failure(self, sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
        """A run failed: keep the exception."""
        request = getattr(sender, "request", None)
        row = self.ledger.row_of(request, sender)
        if row and not _is_duplicate(request):
            error = _error_text(exception) if exception is not None else "failure"
            self._finish(row, lambda store: store.mark_failure(*row, error))

    def revoked(self, sender: Any = None, request: Any = None, terminated: bool = False,
                signum: Any = None, expired: bool = False, **_: Any) -> None:
        """A run was revoked, terminated or expired."""
        row = self.ledger.row_of(request, sender)
        if row:
            note = "expired" if expired else (f"terminated (signal {signum})" if terminated else None)
            self._finish(row, lambda store: store.mark_revoked(*row, note))

    def _finish(self, row: tuple[str, str], mark: Callable[[WorkerStore], Any]) -> None:
        """Record a run's end and, in the same transaction, release the fire its schedule buffered
        (overlap buffer_one), which is then published from here; if that fails the sweep publishes it."""
        ledger_id, task = row

        def step(store: WorkerStore) -> list[dict]:
            with store.conn.transaction():
                mark(store)
                return store.release_buffered(ledger_id, limit=1, task=task)

        try:
            released = self.ledger.run(step)
        except _LedgerUnavailable:
            return
        for row in released or ():
            _update(self.ledger, lambda store, row=row: self._publish_released(store, row))

    def _publish_released(self, store: WorkerStore, row: dict) -> None:
        from .publish.fires import Fire
        from .publish.message import send_fire
        fire = Fire.from_job(row)
        try:
            with self.app.producer_or_acquire() as producer:
                send_fire(self.app, producer, fire, False)
        except Exception as exc:
            log.warning("runledger: publishing buffered fire %s failed (the sweep will): %s", fire.id, exc)
            return
        store.mark_sent([fire.id])


def install(app: Any) -> None:
    """Keep the run ledger current from this app's workers (idempotent)."""
    if getattr(app, "_runledger_installed", False):
        return
    app._runledger_installed = True
    from celery import signals

    ledger = _Ledger(app)
    app._runledger_ledger = ledger
    hooks = app._runledger_hooks = _Hooks(app, ledger)
    app.on_after_finalize.connect(hooks.wrap_all, weak=False)
    signals.celeryd_init.connect(hooks.wrap_all, weak=False)
    signals.worker_init.connect(hooks.wrap_all, weak=False)
    signals.worker_process_init.connect(hooks.process_init, weak=False)
    signals.task_prerun.connect(hooks.prerun, weak=False)
    signals.task_retry.connect(hooks.retry, weak=False)
    signals.task_success.connect(hooks.success, weak=False)
    signals.task_failure.connect(hooks.failure, weak=False)
    signals.task_revoked.connect(hooks.revoked, weak=False)
    if app.finalized:
        _wrap_all(app, ledger)
