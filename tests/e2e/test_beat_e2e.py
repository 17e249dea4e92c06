"""Real `celery beat -S runledger` and `celery worker` subprocesses, over RabbitMQ and Redis."""

from __future__ import annotations

from itertools import pairwise

import pytest

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat, start_worker
from ..support.rows import insert_schedule, ledger
from ..support.services import wait_for


@pytest.fixture(params=["rabbitmq", "redis"])
def broker(request):
    return request.getfixturevalue("amqp_url" if request.param == "rabbitmq" else "redis_url")


def test_every_second_schedule_runs_once_per_second(db, pg_dsn, schema, broker):
    env, queue = prepare(db, pg_dsn, schema, broker)
    sid = insert_schedule(db, "tick", cron="* * * * * *",
                          template={"args": ["tick", 1, "two"], "kwargs": {"k": {"nested": True}}})
    beat, worker = start_beat(env), start_worker(env)
    try:
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") >= 2, timeout=40,
                 message="the beat and the worker at work")
        # Judged from here: a first fire later than a second (a beat starting on a loaded host) moves the cursor to
        # the next future slot, as after any outage (docs/concepts.md, "Outages coalesce").
        steady = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") >= 7, timeout=40,
                 message="five executions more")
        db.execute("UPDATE job_schedules SET is_active = false")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'") == 0, timeout=10,
                 message="all fires sent")
        rows = ledger(db, sid)
        slots = [r["scheduled_for"] for r in rows]
        assert len(slots) == len(set(slots))
        judged = [t for t in slots if t >= steady]
        assert len(judged) >= 4
        steps = {(b - a).total_seconds() for a, b in pairwise(judged)}
        assert steps == {1.0}, f"fires not one second apart: {slots}"
        assert all(r["payload"]["_schedule"]["schedule_name"] == "tick" for r in rows)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM executions") == len(rows), timeout=15,
                 message="every fire executed")
        executions = db.execute("SELECT * FROM executions ORDER BY n").fetchall()
        by_id = {str(r["id"]): r for r in rows}
        for ex in executions:
            row = by_id[ex["task_id"]]  # task id == ledger id
            assert ex["args"] == [1, "two"] and ex["kwargs"] == {"k": {"nested": True}}
            assert ex["schedule"]["schedule_id"] == str(sid)
            assert ex["schedule"]["scheduled_for"] == row["payload"]["_schedule"]["scheduled_for"]
            assert ex["schedule"]["ledger_id"] == ex["task_id"]
        assert len({ex["task_id"] for ex in executions}) == len(executions)
        assert beat.alive(), beat.log()
    finally:
        beat.stop()
        worker.stop()
        delete_queue(broker, queue)
