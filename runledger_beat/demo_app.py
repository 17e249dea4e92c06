"""The Celery app `runledger-beat demo` runs: configured from the environment by demo.py."""

from __future__ import annotations

import json
import os
import socket

import psycopg
from celery import Celery

from .payload import schedule_info

_folder = os.environ.get("RUNLEDGER_DEMO_BROKER_DIR", "/tmp/runledger-demo-broker")

app = Celery("runledger_demo", broker="filesystem://")
app.conf.update(
    broker_transport_options={"data_folder_in": _folder, "data_folder_out": _folder},
    runledger_dsn=os.environ.get("RUNLEDGER_DSN"),
    runledger_schema=os.environ.get("RUNLEDGER_SCHEMA", "runledger"),
    runledger_send_sent_events=False,  # the filesystem transport has no fanout for events
    runledger_recovery_grace=5.0,
    beat_max_loop_interval=1,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

_conn: psycopg.Connection | None = None


@app.task(bind=True, name="demo.hello")
def hello(self, who: str, **kwargs) -> str:
    """Record that the task ran, with the fire's schedule metadata read from the request."""
    global _conn
    if _conn is None:
        _conn = psycopg.connect(os.environ["RUNLEDGER_DSN"], autocommit=True)
    info = schedule_info(self.request) or {}
    _conn.execute(
        "INSERT INTO demo_runs (task_id, who, scheduled_for, worker) VALUES (%s, %s, %s, %s)",
        (self.request.id, who, info.get("scheduled_for"), socket.gethostname()))
    return json.dumps({"hello": who})
