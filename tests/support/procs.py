"""Real `celery beat` / `celery worker` subprocesses for end-to-end tests."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

EXECUTIONS_DDL = """
CREATE TABLE IF NOT EXISTS executions (
    n serial PRIMARY KEY, task_id text, label text, args jsonb, kwargs jsonb,
    schedule jsonb, worker text, pid int,
    at timestamptz NOT NULL DEFAULT clock_timestamp(), finished_at timestamptz)
"""


class Proc:
    """A started celery subprocess with its log file."""

    def __init__(self, argv: list[str], env: dict[str, str], name: str, cwd: Path = ROOT) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix=f"rl-{name}-", suffix=".log")[1])
        self._log = open(self.log_path, "wb")  # noqa: SIM115 -- closed by stop()
        self.popen = subprocess.Popen(argv, env=env, cwd=cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                      start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.alive():
            self.kill(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(signal.SIGKILL)
                self.popen.wait(5)
        self._log.close()
        return self.popen.returncode


def celery_env(dsn: str, schema: str, broker: str, queue: str, extra: dict | None = None,
               hook: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "RUNLEDGER_DSN": dsn, "RL_SCHEMA": schema, "RL_BROKER_URL": broker, "RL_QUEUE": queue,
        "RL_EXTRA": json.dumps(extra or {}), "RL_INSTALL_HOOK": "1" if hook else "0",
        "PYTHONPATH": str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
        "PYTHONUNBUFFERED": "1",
    })
    return env


def start_beat(env: dict[str, str], name: str = "beat", loglevel: str = "INFO", scheduler: str = "runledger") -> Proc:
    argv = [sys.executable, "-m", "celery", "-A", "tests.support.celeryapp", "beat", "-S", scheduler,
            "--loglevel", loglevel, "--pidfile="]
    return Proc(argv, env, name)


def start_worker(env: dict[str, str], name: str = "worker", concurrency: int = 2, pool: str = "prefork",
                 hostname: str | None = None) -> Proc:
    argv = [sys.executable, "-m", "celery", "-A", "tests.support.celeryapp", "worker", "--loglevel", "INFO",
            "-c", str(concurrency), "-P", pool, "-Q", env["RL_QUEUE"], "--without-gossip", "--without-mingle",
            "--without-heartbeat", "-E", "-n", hostname or f"{name}-{os.getpid()}@%h"]
    return Proc(argv, env, name)
