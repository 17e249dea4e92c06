"""The Celery app the end-to-end tests run under real `celery beat` and `celery worker`.

Configured from the environment so each test gets its own schema and queue:
RL_BROKER_URL, RUNLEDGER_DSN, RL_SCHEMA, RL_QUEUE and optional RL_EXTRA (JSON
merged into app.conf). Tasks write each execution to the `executions` table of
the test schema, so tests count real executions in SQL (over RL_RECORD_DSN when
set: a direct connection while the app's own goes through a pooler).
"""

from __future__ import annotations

import json
import os
import socket
import time

import psycopg
from celery import Celery

from runledger_beat.payload import schedule_info

app = Celery("rltest", broker=os.environ.get("RL_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    runledger_dsn=os.environ.get("RUNLEDGER_DSN"),
    runledger_schema=os.environ.get("RL_SCHEMA", "runledger"),
    task_default_queue=os.environ.get("RL_QUEUE", "celery"),
    beat_max_loop_interval=5,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    task_acks_late=False,
    timezone="UTC",
)
app.conf.update(json.loads(os.environ.get("RL_EXTRA", "{}")))
if os.environ.get("RL_INSTALL_HOOK") == "1":
    import runledger_beat

    runledger_beat.install(app)

_conn: psycopg.Connection | None = None


def _db() -> psycopg.Connection:
    global _conn
    if _conn is None or _conn.closed:
        _conn = psycopg.connect(os.environ.get("RL_RECORD_DSN") or os.environ["RUNLEDGER_DSN"], autocommit=True)
        _conn.execute(f'SET search_path TO "{os.environ["RL_SCHEMA"]}"')
    return _conn


def _record(task, label: str, args: list, kwargs: dict) -> None:
    _db().execute(
        "INSERT INTO executions (task_id, label, args, kwargs, schedule, worker, pid)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (task.request.id, label, json.dumps(args), json.dumps(kwargs),
         json.dumps(schedule_info(task.request)), socket.gethostname(), os.getpid()))


@app.task(bind=True, name="rl.record")
def record(self, label: str, *args, **kwargs):
    """Record one execution (the end-to-end tests' workhorse)."""
    _record(self, label, list(args), kwargs)
    return label


@app.task(bind=True, name="rl.sleepy")
def sleepy(self, label: str, seconds: float = 1.0):
    """Record an execution and hold the worker for a while (overlap tests)."""
    _record(self, label, [seconds], {})
    time.sleep(seconds)
    _db().execute("UPDATE executions SET finished_at = clock_timestamp() WHERE task_id = %s", (self.request.id,))
    return label


@app.task(bind=True, name="rl.fail")
def fail(self, label: str):
    """Record an execution and raise."""
    _record(self, label, [], {})
    raise ValueError(f"failing on purpose: {label}")


@app.task(bind=True, name="rl.flaky", autoretry_for=(RuntimeError,), retry_kwargs={"max_retries": 3, "countdown": 0.2})
def flaky(self, label: str, fail_times: int = 1):
    """Fail the first `fail_times` attempts, then succeed (autoretry tests)."""
    _record(self, label, [fail_times], {})
    if self.request.retries < fail_times:
        raise RuntimeError(f"attempt {self.request.retries} fails")
    return label


@app.task(bind=True, name="rl.noop")
def noop(self, label: str = "noop"):
    """Do nothing but record that it ran (what an attacker who can publish might send)."""
    _record(self, label, [], {})
    return label
