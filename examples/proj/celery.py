"""A small Celery project scheduled by runledger_beat."""

import os
from datetime import timedelta

from celery import Celery
from celery.schedules import crontab

app = Celery("proj", broker=os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    timezone="Europe/Berlin",
    runledger_dsn=os.environ.get("RUNLEDGER_DSN", "postgresql://postgres@127.0.0.1:5432/test"),
    runledger_schema=os.environ.get("RUNLEDGER_SCHEMA", "runledger"),
    beat_schedule={
        "nightly-report": {
            "task": "proj.report",
            "schedule": crontab(minute=30, hour=2, day_of_week="mon-fri"),
            "args": ("daily",),
            "options": {"queue": "reports", "expires": 3600},
        },
        "heartbeat": {
            "task": "proj.ping",
            "schedule": timedelta(seconds=float(os.environ.get("PROJ_HEARTBEAT_SECONDS", "30"))),
            "options": {"expires": 25},
        },
        "cleanup": {"task": "proj.cleanup", "schedule": 300.0, "kwargs": {"older_than_days": 7}},
    },
)
# The tests shorten the heartbeat and drop entries to show removal; a real project has no need.
for _name in filter(None, os.environ.get("PROJ_WITHOUT", "").split(",")):
    app.conf.beat_schedule.pop(_name, None)


@app.task(name="proj.report")
def report(kind):
    return f"{kind} report"


@app.task(name="proj.ping")
def ping():
    return "pong"


@app.task(name="proj.cleanup")
def cleanup(older_than_days=7):
    return older_than_days
