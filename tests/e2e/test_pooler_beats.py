"""Two real beats and a worker with the ledger hook, all through a PgBouncer in transaction mode with a pool of
four server connections: every-second schedules and a 500-fire instant go out once each and on time, the worker
hook keeps the ledger through the pooler, and a pause made through the pooler (no LISTEN there: beats poll)
stops its schedule within the poll interval. The 40-second run is bench/bench_pooler.py."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from datetime import timedelta

import pytest

from runledger_beat.db import connect
from runledger_beat.timing.engine import Timing, next_fire_after

from ..support.e2e import delete_queue, prepare
from ..support.pooler import PgBouncer
from ..support.procs import start_beat, start_worker
from ..support.services import wait_for

pytestmark = pytest.mark.slow

EVERY_SECOND = 8
BURST = 500
WINDOW = 10  # seconds of every-second fires judged
POLL = 1.0


def _cli(dsn: str, schema: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, RUNLEDGER_POOL_MODE="transaction")
    return subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--dsn", dsn, "--schema", schema, *argv],
                          capture_output=True, text=True, timeout=60, env=env)


def _insert_burst(db, at) -> None:
    expr = f"{at.second} * * * * *"
    with db.cursor().copy("COPY job_schedules (id, name, job_type, payload_template, kind, cron_expr, next_fire_at)"
                          " FROM STDIN") as copy:
        for i in range(BURST):
            sid = uuid.uuid4()
            cursor = next_fire_after(Timing("cron", cron=expr).validate(), at - timedelta(seconds=1), sid)
            assert cursor == at
            copy.write_row((sid, f"burst-{i:03d}", "rl.record", f'{{"args": ["b{i}"], "kwargs": {{}}}}', "cron",
                            expr, cursor))


@pytest.mark.serial
def test_two_beats_and_a_worker_through_pgbouncer_transaction_mode(pg_dsn, schema, amqp_url):
    pooler = PgBouncer(pg_dsn, pool_mode="transaction", pool_size=4)
    pooled = pooler.dsn_through(pg_dsn)
    db = connect(pg_dsn, schema, autocommit=True)
    env, queue = prepare(db, pooled, schema, amqp_url, hook=True,
                         extra={"runledger_pool_mode": "transaction", "runledger_poll_interval": POLL})
    env["RL_RECORD_DSN"] = pg_dsn  # the test's own bookkeeping of executions goes direct
    start = db.execute("SELECT date_trunc('second', now()) + interval '6 seconds' AS t").fetchone()["t"]
    end = start + timedelta(seconds=WINDOW)
    for i in range(EVERY_SECOND):
        db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, next_fire_at)"
                   " VALUES (%s, %s, 'rl.record', %s, 'cron', '* * * * * *', %s)",
                   (uuid.uuid4(), f"each-{i}", f'{{"args": ["each-{i}"], "kwargs": {{}}}}', start))
    burst_at = start + timedelta(seconds=4)
    _insert_burst(db, burst_at)
    beats = [start_beat(env, f"pooled{i}") for i in range(2)]
    worker = start_worker(env, concurrency=2)
    try:
        pause_after = start + timedelta(seconds=WINDOW - 4)
        wait_for(lambda: db.execute("SELECT now() > %s AS go", (pause_after,)).fetchone()["go"],
                 timeout=WINDOW + 30, interval=0.2, message="the pause instant")
        paused = _cli(pooled, schema, "pause", "each-0", "--note", "through the pooler")
        assert paused.returncode == 0, paused.stderr
        paused_done = db.execute("SELECT now() AS t").fetchone()["t"]
        wait_for(lambda: db.execute("SELECT now() > %s AS done", (end + timedelta(seconds=2),)).fetchone()["done"],
                 timeout=WINDOW + 30, interval=0.5, message="the test window")
        logs = "\n".join(b.log()[-3000:] for b in beats)
        assert all(b.alive() for b in beats), logs

        # every slot once: each schedule that kept firing has one row per second of the window
        # a row the worker started before beat marked it keeps no sent_at: its start bounds the publish from above
        rows = db.execute("SELECT schedule_name, scheduled_for, coalesce(sent_at, started_at) AS sent_at, id FROM jobs"
                          " WHERE scheduled_for >= %s AND scheduled_for < %s AND schedule_name <> 'each-0'",
                          (start, end)).fetchall()
        each = [r for r in rows if r["schedule_name"].startswith("each-")]
        burst = [r for r in rows if r["schedule_name"].startswith("burst-")]
        assert len(each) == (EVERY_SECOND - 1) * WINDOW, logs
        assert len({(r["schedule_name"], r["scheduled_for"]) for r in each}) == len(each)
        assert len(burst) == BURST and {r["scheduled_for"] for r in burst} == {burst_at}, logs
        for label, group in (("every-second", each), ("instant", burst)):
            lags = sorted((r["sent_at"] - r["scheduled_for"]).total_seconds() for r in group)
            p99 = lags[int(len(lags) * 0.99) - 1]
            print(f"pooler {label}: {len(lags)} fires, p50 {lags[len(lags) // 2] * 1000:.1f} ms, "
                  f"p99 {p99 * 1000:.1f} ms, max {lags[-1] * 1000:.1f} ms")
            assert lags[0] >= 0 and p99 <= 0.25, label

        # the pause went through the pooler and stopped the schedule within the poll interval
        last = db.execute("SELECT max(scheduled_for) AS t FROM jobs WHERE schedule_name = 'each-0'").fetchone()["t"]
        assert last is not None and last <= paused_done + timedelta(seconds=POLL)
        assert db.execute("SELECT pause_note FROM job_schedules WHERE name = 'each-0'").fetchone()["pause_note"] \
            == "through the pooler"

        # the worker hook kept the ledger through the pooler; each fire ran once
        ids = [str(r["id"]) for r in rows]
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE id::text = ANY(%s) AND status = 'success'",
                                    (ids,)).fetchone()["n"] == len(ids),
                 timeout=60, interval=0.5, message="every fire of the window run and marked success")
        ran = db.execute("SELECT count(*) AS n, count(DISTINCT task_id) AS d FROM executions"
                         " WHERE task_id = ANY(%s)", (ids,)).fetchone()
        assert ran["n"] == ran["d"] == len(ids)
        assert pooler.server_connections(pg_dsn.rsplit("/", 1)[1]) <= 4
    finally:
        for b in beats:
            b.stop()
        worker.stop()
        db.close()
        delete_queue(amqp_url, queue)
        pooler.close()
