"""The Celery app of the chaos soak (bench/chaos.py): beats and workers with the runledger hook.

Configured from the environment: RUNLEDGER_DSN (the ledger, behind the faults), CHAOS_BROKER_URL, CHAOS_QUEUE and
CHAOS_RECORD_DSN, a database out of the faults' reach where each worker process records every delivery it was
handed (``deliveries``, from ``task_prerun``, before the hook's duplicate guard; a message the broker
redelivered is flagged) and every run of a task body
(``executions``). A record is retried until it lands; a token of its own makes a retried insert count once, so
two rows for one task id are two deliveries, or two runs, never one record written twice.
"""

from __future__ import annotations

import os
import time
import uuid

import psycopg
from celery import Celery, signals

import runledger_beat

RECORD_DDL = """
CREATE TABLE IF NOT EXISTS deliveries (token uuid PRIMARY KEY, task_id text NOT NULL, pid int NOT NULL,
                                       redelivered boolean NOT NULL,
                                       at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE IF NOT EXISTS executions (token uuid PRIMARY KEY, task_id text NOT NULL, label text, pid int NOT NULL,
                                       at timestamptz NOT NULL DEFAULT clock_timestamp());
"""

app = Celery("chaos", broker=os.environ.get("CHAOS_BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    runledger_dsn=os.environ.get("RUNLEDGER_DSN"),
    task_default_queue=os.environ.get("CHAOS_QUEUE", "chaos"),
    runledger_recovery_grace=5,
    beat_max_loop_interval=5,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    broker_connection_max_retries=None,
    worker_prefetch_multiplier=16,
    timezone="UTC",
)
runledger_beat.install(app)

_conn: psycopg.Connection | None = None


def _record(table: str, task_id: str, extra: dict[str, object]) -> None:
    """Insert one row into ``table``, retrying (same token) until it lands."""
    global _conn
    token = uuid.uuid4()
    columns = ", ".join(["token", "task_id", "pid", *extra])
    values = (token, task_id, os.getpid(), *extra.values())
    placeholders = ", ".join(["%s"] * len(values))
    for attempt in range(600):
        try:
            if _conn is None or _conn.closed:
                _conn = psycopg.connect(os.environ["CHAOS_RECORD_DSN"], autocommit=True, connect_timeout=3)
            _conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({placeholders}) ON CONFLICT DO NOTHING", values)
            return
        except psycopg.Error:
            _conn = None
            time.sleep(min(0.1 * (attempt + 1), 1.0))
    raise RuntimeError(f"could not record into {table}")


@signals.task_prerun.connect
def _delivered(task_id: str | None = None, task: object = None, **_: object) -> None:
    """A message reached a worker process (``redelivered``: the broker sent it again, unacknowledged)."""
    if task_id:
        info = getattr(getattr(task, "request", None), "delivery_info", None) or {}
        _record("deliveries", task_id, {"redelivered": bool(info.get("redelivered"))})


@app.task(bind=True, name="chaos.tick")
def tick(self, label: str = "") -> str:
    """One fire's work: record that it ran."""
    _record("executions", self.request.id, {"label": label})
    return label
