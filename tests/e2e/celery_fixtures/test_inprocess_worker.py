"""A due schedule runs on Celery's in-process ``celery_worker``, with pytest-celery installed and runledger's
``runledger_dsn`` alone naming the schema (no ``schema=`` anywhere)."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from runledger_beat import api, schedule_info
from runledger_beat.testing import run_due


def test_a_due_schedule_runs_on_the_in_process_worker(celery_app, celery_worker, runledger_dsn):
    assert type(celery_worker).__module__.startswith("celery."), "pytest-celery's Docker worker shadows Celery's"
    ran = threading.Event()
    seen = {}

    @celery_app.task(bind=True, name="proj.nightly")
    def nightly(self, kind, copies=1):
        seen.update(kind=kind, copies=copies, task_id=self.request.id, info=schedule_info(self.request))
        ran.set()

    celery_worker.reload()  # the worker learns the task registered after it started
    at = datetime(2031, 1, 1, 3, 0, tzinfo=timezone.utc)
    api.create(runledger_dsn, "nightly", "proj.nightly", cron="0 3 * * *", args=["full"], kwargs={"copies": 2},
               start=datetime(2031, 1, 1, tzinfo=timezone.utc))
    (row,) = run_due(celery_app, runledger_dsn, at)
    assert row["status"] == "sent" and row["scheduled_for"] == at
    assert ran.wait(30), "the in-process worker never ran the fired task"
    assert seen["kind"] == "full" and seen["copies"] == 2 and seen["task_id"] == row["id"]
    assert seen["info"]["schedule_name"] == "nightly" and seen["info"]["scheduled_for"] == "2031-01-01T03:00:00Z"
    assert api.get(runledger_dsn, "nightly")["last_fired_at"] is not None


def test_pytest_celery_is_installed_beside_both_plugins(request):
    pytest.importorskip("pytest_celery")
    names = {name for name, _ in request.config.pluginmanager.list_name_plugin()}
    assert {"celery", "runledger"} <= names
