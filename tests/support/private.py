"""Services of a test's own, on ports of their own: a RabbitMQ node and a PostgreSQL cluster it may stop, restart
or break without touching the shared ones every other test uses (so such tests run in parallel with the rest).

``RabbitNode`` runs ``rabbitmq-server`` with its own node name, ports and data directory; ``RedisServer`` a
``redis-server`` that persists every write; ``PostgresCluster``
is a Debian ``pg_createcluster`` cluster (trust auth on loopback). Both start in seconds and are removed at the
end. A machine without the commands skips (or, with RUNLEDGER_REQUIRE_SERVICES=1, fails) the test.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg

from .services import missing, wait_for


def free_port() -> int:
    """A TCP port nothing listens on now (loopback)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _user_exists(name: str) -> bool:
    try:
        import pwd
        pwd.getpwnam(name)
        return True
    except (ImportError, KeyError):
        return False


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


class RabbitNode:
    """A RabbitMQ node of the test's own: ``url``, ``stop_app()`` / ``start_app()`` (the broker away and back,
    the node up), ``restart()``; ``close()`` ends it and removes its files."""

    def __init__(self) -> None:
        if shutil.which("rabbitmq-server") is None:
            missing("RabbitMQ (private node)", "rabbitmq-server is not installed")
        self.name = f"rltest{uuid.uuid4().hex[:8]}@localhost"
        self.port = free_port()
        self.home = tempfile.mkdtemp(prefix="runledger-rabbit-")
        for sub in ("mnesia", "log"):
            os.mkdir(f"{self.home}/{sub}")
        Path(self.home, "enabled_plugins").write_text("[].\n")
        Path(self.home, "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        os.chmod(self.home, 0o755)
        if shutil.which("chown") and _user_exists("rabbitmq"):  # run as root, the server drops to this user
            subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", self.home], check=True, capture_output=True)
        self.env = dict(os.environ, RABBITMQ_NODENAME=self.name, RABBITMQ_NODE_PORT=str(self.port),
                        RABBITMQ_DIST_PORT=str(free_port()), RABBITMQ_MNESIA_BASE=f"{self.home}/mnesia",
                        RABBITMQ_LOG_BASE=f"{self.home}/log", RABBITMQ_PID_FILE=f"{self.home}/pid",
                        RABBITMQ_ENABLED_PLUGINS_FILE=f"{self.home}/enabled_plugins",
                        RABBITMQ_CONFIG_FILE=f"{self.home}/rabbitmq.conf",
                        RABBITMQ_FEATURE_FLAGS_FILE=f"{self.home}/feature_flags")
        self.url = f"amqp://guest:guest@127.0.0.1:{self.port}//"
        subprocess.run(["rabbitmq-server", "-detached"], env=self.env, check=True, capture_output=True, timeout=60,
                       cwd=self.home)
        wait_for(lambda: _listening(self.port), timeout=90, interval=0.2,
                 message=f"RabbitMQ node {self.name} listening (log: {self.home}/log)")

    def _ctl(self, *args: str, timeout: float = 60) -> None:
        subprocess.run(["rabbitmqctl", "-n", self.name, *args], env=self.env, check=True, capture_output=True,
                       timeout=timeout)

    def stop_app(self) -> None:
        """Stop the broker application (connections dropped, nothing listens) while the node stays up."""
        self._ctl("stop_app")
        wait_for(lambda: not _listening(self.port), timeout=30, message="the private broker stopped")

    def start_app(self) -> None:
        """Start the broker application again and wait until it listens."""
        self._ctl("start_app")
        wait_for(lambda: _listening(self.port), timeout=60, message="the private broker listening again")

    def stop_node(self) -> None:
        """Stop the whole node (the Erlang VM exits)."""
        self._ctl("stop")
        wait_for(lambda: not _listening(self.port), timeout=30, message="the private node stopped")

    def start_node(self) -> None:
        """Start the node again on its files (durable queues and persistent messages survive)."""
        subprocess.run(["rabbitmq-server", "-detached"], env=self.env, check=True, capture_output=True, timeout=60,
                       cwd=self.home)
        wait_for(lambda: _listening(self.port), timeout=90, interval=0.2, message="the private node listening again")

    def restart(self) -> None:
        """Stop the whole node and start it again."""
        self.stop_node()
        self.start_node()

    def queue_types(self) -> dict[str, str]:
        """Each queue's name and type (classic, quorum, stream)."""
        out = subprocess.run(["rabbitmqctl", "-n", self.name, "list_queues", "name", "type", "--quiet",
                              "--no-table-headers"], env=self.env, check=True, capture_output=True, text=True,
                             timeout=60).stdout
        return dict(line.split()[:2] for line in out.splitlines() if len(line.split()) >= 2)

    def close(self) -> None:
        """Stop the node and remove its files."""
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self._ctl("stop", timeout=60)
        shutil.rmtree(self.home, ignore_errors=True)


class RedisServer:
    """A ``redis-server`` of the test's own on a free port, persisting every write (append-only file, fsync
    always) so a ``restart()`` keeps what was queued; ``close()`` ends it and removes its files."""

    def __init__(self) -> None:
        if shutil.which("redis-server") is None:
            missing("Redis (private server)", "redis-server is not installed")
        self.port = free_port()
        self.home = tempfile.mkdtemp(prefix="runledger-redis-")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        """Start the server (on the same port and files) and wait until it listens."""
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.home,
             "--appendonly", "yes", "--appendfsync", "always", "--save", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=self.home)
        wait_for(lambda: _listening(self.port), timeout=30, message="the private Redis listening")

    def stop(self) -> None:
        """Stop the server (SIGTERM: it writes its files and exits) and wait until nothing listens."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        wait_for(lambda: not _listening(self.port), timeout=30, message="the private Redis stopped")

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop the server and remove its files."""
        with contextlib.suppress(subprocess.SubprocessError, OSError, AssertionError):
            self.stop()
        shutil.rmtree(self.home, ignore_errors=True)


class PostgresCluster:
    """A PostgreSQL cluster of the test's own (``pg_createcluster``): ``dsn``, ``restart()``, ``stop()``,
    ``start()``; ``close()`` drops it."""

    def __init__(self) -> None:
        if shutil.which("pg_createcluster") is None or not os.path.isdir("/etc/postgresql"):
            missing("PostgreSQL (private cluster)", "Debian's postgresql-common is not installed")
        self.version = sorted(os.listdir("/etc/postgresql"))[-1]
        self.name = f"rltest{uuid.uuid4().hex[:8]}"
        self.port = free_port()
        subprocess.run(["pg_createcluster", self.version, self.name, "-p", str(self.port), "--start",
                        "--", "--auth-local=trust", "--auth-host=trust"],
                       check=True, capture_output=True, timeout=120)
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        wait_for(self._answers, timeout=30, message=f"cluster {self.name} answering")

    def _answers(self) -> bool:
        try:
            with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def _ctl(self, action: str) -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action],
                       check=True, capture_output=True, timeout=120)

    def restart(self) -> None:
        """Restart the cluster (every session ends) and wait until it answers."""
        self._ctl("restart")
        wait_for(self._answers, timeout=60, message="the private cluster answering again")

    def stop(self) -> None:
        self._ctl("stop")

    def start(self) -> None:
        self._ctl("start")
        wait_for(self._answers, timeout=60, message="the private cluster answering again")

    def close(self) -> None:
        """Stop and drop the cluster."""
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], capture_output=True, timeout=120)
