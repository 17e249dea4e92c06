"""The Celery app `runledger-beat demo` runs: configured from the environment by runner.py.

Its broker is kombu's filesystem transport; every broker file, control
(pidbox) files included, lives in RUNLEDGER_DEMO_BROKER_DIR, a temporary folder.
"""

from __future__ import annotations

import json
import os
import socket

import psycopg
from celery import Celery

from ..db.connect import connect
from ..payload import schedule_info
from .store import DemoStore

_folder = os.environ.get("RUNLEDGER_DEMO_BROKER_DIR") or os.path.join(os.getcwd(), ".runledger-demo-broker")

app = Celery("runledger_demo", broker="filesystem://")
app.conf.update(
    broker_transport_options={"data_folder_in": _folder, "data_folder_out": _folder,
                              "control_folder": os.path.join(_folder, "control")},
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
        _conn = connect(os.environ["RUNLEDGER_DSN"], os.environ.get("RUNLEDGER_SCHEMA", "runledger"),
                        autocommit=True, application_name="runledger_demo.task")
    info = schedule_info(self.request) or {}
    DemoStore(_conn).demo_record_run(self.request.id, who, info.get("scheduled_for"), socket.gethostname())
    return json.dumps({"hello": who})
