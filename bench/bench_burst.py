"""Burst benchmark: N schedules due at the same instant, one real `celery beat -S runledger`.

Measures the time from the due instant until every ledger row is committed and
every message sits in the RabbitMQ queue, plus Celery `send_task` and raw kombu
publish rates measured in the same run. Prints JSON, then a markdown table.

    .venv/bin/python bench/bench_burst.py --n 1000 10000
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
from celery import Celery
from kombu import Connection, Exchange, Producer, Queue

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runledger_beat.db import connect, migrate  # noqa: E402

DSN = os.environ.get("RUNLEDGER_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
AMQP = os.environ.get("RUNLEDGER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")


def queue_depth(queue: str) -> int:
    with Connection(AMQP) as conn:
        return conn.default_channel.queue_declare(queue, passive=True).message_count


def raw_kombu_rate(n: int) -> float:
    queue = Queue(f"bench_raw_{uuid.uuid4().hex[:8]}", Exchange("", type="direct"), auto_delete=False)
    with Connection(AMQP) as conn:
        producer = Producer(conn.default_channel)
        queue.declare(channel=conn.default_channel)
        body = {"x": 1}
        started = time.perf_counter()
        for _ in range(n):
            producer.publish(body, routing_key=queue.name, serializer="json")
        elapsed = time.perf_counter() - started
        conn.default_channel.queue_delete(queue.name)
    return n / elapsed


def send_task_rate(n: int) -> float:
    app = Celery("bench", broker=AMQP)
    queue = f"bench_send_{uuid.uuid4().hex[:8]}"
    with app.producer_or_acquire() as producer:
        started = time.perf_counter()
        for i in range(n):
            app.send_task("bench.noop", (i,), queue=queue, producer=producer)
        elapsed = time.perf_counter() - started
    with Connection(AMQP) as conn:
        conn.default_channel.queue_delete(queue)
    return n / elapsed


def burst(n: int, beats: int) -> dict:
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    queue = f"benchq_{uuid.uuid4().hex[:8]}"
    with connect(DSN, "public") as conn:
        migrate(conn, schema)
    with connect(DSN, schema, autocommit=True) as db:
        due = db.execute("SELECT date_trunc('second', now()) + interval '8 seconds' AS t").fetchone()["t"]
        with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at)"
                              " FROM STDIN") as copy:
            for i in range(n):
                copy.write_row((uuid.uuid4(), f"s{i}", "bench.noop", "cron", "0 0 1 1 *", due))
    env = dict(os.environ, RUNLEDGER_DSN=DSN, RL_SCHEMA=schema, RL_BROKER_URL=AMQP, RL_QUEUE=queue,
               RL_EXTRA=json.dumps({"runledger_batch_size": 5000}), PYTHONPATH=str(ROOT))
    with Connection(AMQP) as conn:
        conn.default_channel.queue_declare(queue, durable=True, auto_delete=False)
    procs = [subprocess.Popen([sys.executable, "-m", "celery", "-A", "tests.celeryapp", "beat", "-S", "runledger",
                               "--loglevel", "WARNING", "--pidfile="], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(beats)]
    peak_rss = 0
    try:
        with connect(DSN, schema, autocommit=True) as db:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                rss = sum(_rss_kb(p.pid) for p in procs)
                peak_rss = max(peak_rss, rss)
                sent = db.execute("SELECT count(*) AS n, max(sent_at) AS last FROM jobs WHERE status = 'sent'").fetchone()
                if sent["n"] >= n and queue_depth(queue) >= n:
                    break
                time.sleep(0.05)
            stats = db.execute("SELECT count(*) AS n, count(DISTINCT (schedule_id, scheduled_for)) AS slots,"
                               " max(sent_at) AS last FROM jobs").fetchone()
        elapsed = (stats["last"] - due).total_seconds()
        return {"bench": "burst", "n": n, "beats": beats, "seconds_after_due": round(elapsed, 3),
                "fires_per_s": round(n / elapsed), "ledger_rows": stats["n"], "duplicates": stats["n"] - stats["slots"],
                "in_queue": queue_depth(queue), "peak_rss_mb": round(peak_rss / 1024, 1)}
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        with Connection(AMQP) as conn:
            conn.default_channel.queue_delete(queue)
        with psycopg.connect(DSN, autocommit=True) as c:
            c.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--beats", type=int, nargs="+", default=[1, 3])
    args = parser.parse_args()
    results = [{"bench": "limits", "raw_kombu_per_s": round(raw_kombu_rate(5000)),
                "send_task_per_s": round(send_task_rate(5000))}]
    print(json.dumps(results[0]), flush=True)
    for n in args.n:
        for beats in args.beats:
            results.append(burst(n, beats))
            print(json.dumps(results[-1]), flush=True)
    print("\n| N | beats | s after due | fires/s | duplicates | peak RSS MB |\n|---|---|---|---|---|---|")
    for r in results[1:]:
        print(f"| {r['n']} | {r['beats']} | {r['seconds_after_due']} | {r['fires_per_s']} | {r['duplicates']} | {r['peak_rss_mb']} |")
    print(f"\nlimits: raw kombu {results[0]['raw_kombu_per_s']}/s, send_task {results[0]['send_task_per_s']}/s")


if __name__ == "__main__":
    main()
