"""Shared parts of the benchmarks: services, watchers that time a burst, process RSS/CPU, output.

Every benchmark prints one JSON object per measurement (``emit``) and returns it,
so ``bench/run.py`` can run them all in one go and draw the table and the plot.
Services are found like the tests find them: RUNLEDGER_TEST_DSN,
RUNLEDGER_TEST_AMQP_URL, RUNLEDGER_TEST_REDIS_URL (local defaults).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
from kombu import Connection

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runledger_beat import db  # noqa: E402
from runledger_beat.db import connect, migrate  # noqa: E402

DSN = os.environ.get("RUNLEDGER_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test")
AMQP = os.environ.get("RUNLEDGER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS = os.environ.get("RUNLEDGER_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def emit(result: dict[str, Any]) -> dict[str, Any]:
    """Print one measurement as a JSON line and return it."""
    print(json.dumps(result), flush=True)
    return result


def token() -> str:
    return uuid.uuid4().hex[:8]


# -- Postgres -------------------------------------------------------------------

def fresh_schema() -> str:
    """A new, migrated runledger schema of its own."""
    name = f"bench_{token()}"
    with connect(DSN, "public") as conn:
        migrate(conn, name)
    return name


def drop_schema(name: str) -> None:
    with psycopg.connect(DSN, autocommit=True) as conn:
        db.drop_schema(conn, name)


def insert_schedules(db: psycopg.Connection, n: int, next_fire_at: datetime, cron: str = "0 0 1 1 *",
                     task: str = "bench.noop") -> None:
    """COPY ``n`` cron schedules whose cursor is ``next_fire_at``."""
    with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at) FROM STDIN") as copy:
        for i in range(n):
            copy.write_row((uuid.uuid4(), f"s{i}", task, "cron", cron, next_fire_at))
    db.execute("ANALYZE job_schedules")


def db_offset(db: psycopg.Connection) -> float:
    """Database clock minus local wall clock, in seconds (same host: about 0)."""
    before = time.time()
    db_now = db.execute("SELECT clock_timestamp() AS t").fetchone()["t"].timestamp()
    return db_now - (before + time.time()) / 2


# -- RabbitMQ -------------------------------------------------------------------

def declare_queue(name: str) -> None:
    with Connection(AMQP) as conn:
        conn.default_channel.queue_declare(name, durable=True, auto_delete=False)


def delete_queue(name: str) -> None:
    try:
        with Connection(AMQP, connect_timeout=3) as conn:
            conn.default_channel.queue_delete(name)
    except Exception:
        pass


def queue_depth(name: str) -> int:
    with Connection(AMQP) as conn:
        return conn.default_channel.queue_declare(name, passive=True).message_count


class Watch(threading.Thread):
    """From ``begin``, polls ``probe`` every ``interval`` s until it reaches ``target``; ``reached`` is when."""

    def __init__(self, probe: Any, target: int, begin: float, deadline: float, interval: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.probe, self.target, self.begin, self.deadline, self.interval = probe, target, begin, deadline, interval
        self.reached: float | None = None
        self.last = 0

    def run(self) -> None:
        # Polling only from ``begin`` (the due instant) keeps the watchers off the CPU
        # while the beats prepare.
        time.sleep(max(0.0, self.begin - time.time()))
        while time.time() < self.deadline:
            self.last = self.probe()
            if self.last >= self.target:
                # A probe that reads its server's clock with the state tells when the server saw it (local time);
                # the others, when the answer arrived here.
                self.reached = getattr(self.probe, "observed", None) or time.time()
                return
            time.sleep(self.interval)


class DepthProbe:
    """Queue depth on one long-lived channel (a passive declare per call)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.conn = Connection(AMQP)
        self.channel = self.conn.default_channel

    def __call__(self) -> int:
        return self.channel.queue_declare(self.queue, passive=True).message_count

    def purge(self) -> int:
        """Empty the queue; returns how many messages it held."""
        return self.channel.queue_purge(self.queue) or 0

    def close(self) -> None:
        self.conn.release()


class RedisDepthProbe:
    """The length of a queue's list on Redis (where Celery's Redis transport pushes a queue's messages)."""

    def __init__(self, queue: str) -> None:
        import redis
        self.queue = queue
        self.client = redis.Redis.from_url(REDIS)

    def __call__(self) -> int:
        return self.client.llen(self.queue)

    def purge(self) -> int:
        """Empty the queue's list; returns how many messages it held."""
        with self.client.pipeline() as pipe:
            held, _ = pipe.llen(self.queue).delete(self.queue).execute()
        return held

    def drop(self) -> None:
        self.client.delete(self.queue)
        self.close()

    def close(self) -> None:
        self.client.close()


class LedgerProbe:
    """Ledger rows committed, at the cost of one index look until any row is visible.

    A burst's rows commit in one transaction, so polling ``count(*)`` over the growing
    table every few milliseconds (a core's work at 100k rows, on a machine of two)
    would be charged to beat. Each look runs in one REPEATABLE READ snapshot: whether
    ``schedule_id`` (one of the burst's schedules) has a row, by its index (a look over
    the whole table would step over every row still uncommitted), and only when it has,
    the count, of that same snapshot.
    """

    def __init__(self, schema: str, schedule_id: uuid.UUID, offset: float) -> None:
        self.conn = connect(DSN, schema)
        self.conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        self.schedule_id, self.offset = schedule_id, offset
        self.observed: float | None = None  # local time by the server's clock, just after the snapshot was taken

    def __call__(self) -> int:
        try:
            look = self.conn.execute("SELECT extract(epoch FROM clock_timestamp())::float8 AS t,"
                                     " EXISTS (SELECT 1 FROM jobs WHERE schedule_id = %s) AS e",
                                     (self.schedule_id,)).fetchone()
            self.observed = look["t"] - self.offset
            if not look["e"]:
                return 0
            return self.conn.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
        finally:
            self.conn.rollback()

    def close(self) -> None:
        self.conn.close()


# -- processes ------------------------------------------------------------------

def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def status_kb(pid: int, field: str) -> int:
    """A /proc/<pid>/status field in kB (VmRSS: now, VmHWM: peak)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def celery_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", BENCH_DSN=DSN, BENCH_AMQP=AMQP,
               BENCH_REDIS=REDIS)
    env.update(extra)
    return env


def wait_for_log(log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{log.name}: {text!r} not seen in {timeout}s:\n{log.read_text(errors='replace')[-2000:]}")


# -- the machine ----------------------------------------------------------------

def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    with psycopg.connect(DSN) as conn:
        pg = conn.execute("SHOW server_version").fetchone()[0]
    with Connection(AMQP) as conn:
        conn.connect()
        rabbit = conn.connection.server_properties.get("version", "?")
    return {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu,
            "cores": os.cpu_count(), "python": platform.python_version(), "postgres": pg,
            "rabbitmq": rabbit if isinstance(rabbit, str) else rabbit.decode()}
