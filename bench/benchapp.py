"""The Celery app every benchmark's beat runs, configured from the environment.

BENCH_SCHEDULER picks what needs configuring: ``runledger`` (default),
``persistent`` (Celery's PersistentScheduler, with BENCH_N crontab entries due at
BENCH_DUE_HOUR:BENCH_DUE_MINUTE UTC), ``redbeat`` or ``django`` (entries made by
the benchmark itself). BENCH_EXTRA is JSON merged into app.conf. BENCH_RECEIVER=1
connects a before_task_publish receiver, as a tracing library would. BENCH_HOOK=1
installs the worker-side ledger hook.
"""

from __future__ import annotations

import json
import os

from celery import Celery
from celery.schedules import crontab

app = Celery("bench", broker=os.environ.get("BENCH_AMQP", "amqp://guest:guest@127.0.0.1:5672//"))
app.conf.update(
    runledger_dsn=os.environ.get("BENCH_DSN"),
    runledger_schema=os.environ.get("BENCH_SCHEMA", "runledger"),
    task_default_queue=os.environ.get("BENCH_QUEUE", "celery"),
    timezone="UTC",
    beat_max_loop_interval=5,
    broker_connection_retry_on_startup=True,
    redbeat_redis_url=os.environ.get("BENCH_REDIS"),
    redbeat_key_prefix=os.environ.get("BENCH_REDBEAT_PREFIX", "redbeat:"),
)
app.conf.update(json.loads(os.environ.get("BENCH_EXTRA", "{}")))

if os.environ.get("BENCH_SCHEDULER") == "persistent":
    _due = crontab(minute=os.environ["BENCH_DUE_MINUTE"], hour=os.environ["BENCH_DUE_HOUR"])
    app.conf.beat_schedule = {f"s{i}": {"task": "bench.noop", "schedule": _due}
                              for i in range(int(os.environ["BENCH_N"]))}


if os.environ.get("BENCH_HOOK") == "1":
    import runledger_beat

    runledger_beat.install(app)


if os.environ.get("BENCH_RECEIVER") == "1":
    from celery import signals

    @signals.before_task_publish.connect(weak=False)
    def _traced(sender=None, headers=None, **kwargs):
        """Stands for a tracing library: any receiver sends beat down Celery's own publish path."""
        headers["x-bench-traced"] = "1"


@app.task(name="bench.noop")
def noop(*args, **kwargs):
    """Nothing: the benchmarks count messages, not work."""
