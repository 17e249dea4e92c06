"""Helpers for testing your own schedules: ``run_due`` runs one scheduling pass at a clock you choose.

    from runledger_beat.testing import run_due

    rows = run_due(app, dsn, datetime(2026, 3, 29, 23, 0, tzinfo=timezone.utc))

The pass is beat's own (beat/claim.py: the time engine, jitter, misfire and
overlap policies, the ledger rows, the cursor moves), judged as if the database
clock read ``at``: every active schedule whose cursor is at or before ``at`` is
claimed and planned with "now" = ``at``. Its fires are then handed to Celery
with the ledger id as task id and beat's headers (``schedule_info`` works in
the task): with ``app.conf.task_always_eager`` the task runs here and now
(``Task.apply``; ``send_task`` ignores eager mode), else ``app.send_task``
publishes it for a worker (a ``celery_worker`` fixture, say). Returns the
ledger rows the pass recorded, as dicts (``runledger_beat.api.public_job``
shape: ``schedule_name``, ``scheduled_for``, ``status``, ``task``, ``payload``,
...), in slot order; skipped fires (misfire or overlap policy) are among them.

Timestamps the database stamps itself (``created_at``, ``sent_at``,
``last_fired_at``) keep the real clock.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .api import public_job
from .beat.claim import run_pass
from .db.beat_store import BeatStore
from .db.connect import connect, schema_of
from .payload import task_arguments
from .publish.fires import Fire
from .publish.message import message_headers, publish_options
from .signing import app_key

__all__ = ["run_due"]

#: Schedules one run_due pass claims at most.
MAX_SCHEDULES = 10_000


def run_due(app: Any, dsn: str, at: datetime, schema: str | None = None) -> list[dict]:
    """One scheduling pass as if the database clock read ``at`` (aware); see the module docstring.

    Without ``schema``, the schema the DSN names (``-c runledger.schema=``, as ``runledger_dsn`` does), else
    "runledger"."""
    if not isinstance(at, datetime) or at.utcoffset() is None:
        raise ValueError("run_due: `at` must be a timezone-aware datetime")
    with connect(dsn, schema_of(dsn, schema), application_name="runledger_beat.testing") as conn:
        store = BeatStore(conn)
        result = run_pass(store, MAX_SCHEDULES, at=at)
        conn.autocommit = True
        eager = bool(app.conf.task_always_eager)
        for fire in result.fires:
            if eager:
                store.mark_sent([fire.id])  # as beat does once the broker confirmed; then it runs
                _apply(app, fire)
            else:
                _send(app, fire)
                store.mark_sent([fire.id])
        rows = store.slot_jobs([s for s, _ in result.slots], [at_ for _, at_ in result.slots])
    return [public_job(r) for r in rows]


def _call_options(app: Any, fire: Fire) -> tuple[list, dict, dict[str, Any]]:
    args, kwargs = task_arguments(fire.payload)
    options = publish_options(app, fire)
    options["headers"] = message_headers(fire, options.pop("headers", None), app_key(app))
    return args, kwargs, options


def _send(app: Any, fire: Fire) -> None:
    """Publish the fire as beat would: Celery's send_task, task id = ledger id, beat's headers."""
    args, kwargs, options = _call_options(app, fire)
    app.send_task(fire.job_type, args, kwargs, task_id=str(fire.id), **options)


def _apply(app: Any, fire: Fire) -> Any:
    """Run the fire's task in this process (task_always_eager), as the worker would run the message."""
    args, kwargs, options = _call_options(app, fire)
    task = app.tasks[fire.job_type]
    return task.apply(args, kwargs, task_id=str(fire.id), headers=options["headers"])
