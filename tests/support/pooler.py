"""A PgBouncer of the test's own in front of a Postgres: transaction pooling, a pool of ``pool_size`` server
connections per database and user, trust authentication, on a free port; run as our own process, ended and its
files removed at ``close()``. ``dsn_through(dsn)`` is the same DSN pointed at the pooler."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg

from .private import _listening, _user_exists, free_port
from .services import missing, wait_for


class PgBouncer:
    """PgBouncer (``pool_mode``) forwarding every database to ``dsn``'s server."""

    def __init__(self, dsn: str, pool_mode: str = "transaction", pool_size: int = 4) -> None:
        binary = shutil.which("pgbouncer") or ("/usr/sbin/pgbouncer" if os.path.exists("/usr/sbin/pgbouncer") else None)
        if binary is None:
            missing("PgBouncer", "pgbouncer is not installed (apt install pgbouncer)")
        info = psycopg.conninfo.conninfo_to_dict(dsn)
        self.server = dsn
        self.user = info.get("user") or "postgres"
        self.port = free_port()
        self.home = tempfile.mkdtemp(prefix="runledger-pgbouncer-")
        Path(self.home, "users.txt").write_text(f'"{self.user}" ""\n')
        Path(self.home, "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={info.get('host') or '127.0.0.1'} port={info.get('port') or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.home}/users.txt\nadmin_users = {self.user}\n"
            f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 500\n"
            f"logfile = {self.home}/pgbouncer.log\npidfile = {self.home}/pgbouncer.pid\n"
            "server_check_delay = 0\nserver_login_retry = 1\n")
        command = [binary, f"{self.home}/pgbouncer.ini"]
        if os.geteuid() == 0:  # PgBouncer will not run as root
            if not _user_exists("postgres"):
                missing("PgBouncer", "running as root and there is no postgres user to run it as")
            subprocess.run(["chown", "-R", "postgres", self.home], check=True, capture_output=True)
            command[1:1] = ["-u", "postgres"]
        self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_for(lambda: _listening(self.port) or self.proc.poll() is not None, timeout=20,
                 message="PgBouncer listening")
        if self.proc.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {self.proc.stderr.read().decode(errors='replace')}"
                               f"{self.log()}")

    def dsn_through(self, dsn: str) -> str:
        """``dsn`` with its host and port replaced by the pooler's."""
        parts = urlsplit(dsn)
        if parts.scheme.startswith("postgres"):
            netloc = parts.netloc.rsplit("@", 1)
            userinfo = netloc[0] + "@" if len(netloc) == 2 else ""
            return urlunsplit(parts._replace(netloc=f"{userinfo}127.0.0.1:{self.port}"))
        return psycopg.conninfo.make_conninfo(dsn, host="127.0.0.1", port=str(self.port))

    def admin(self, command: str) -> list[tuple]:
        """Run a command on PgBouncer's admin console (``SHOW POOLS``, ``PAUSE``...); its rows."""
        with psycopg.connect(host="127.0.0.1", port=self.port, dbname="pgbouncer", user=self.user,
                             autocommit=True, prepare_threshold=None) as conn:
            cur = conn.execute(command)
            return cur.fetchall() if cur.description else []

    def server_connections(self, dbname: str) -> int:
        """Server connections the pooler holds open to ``dbname`` now."""
        rows = self.admin("SHOW SERVERS")
        return sum(1 for row in rows if dbname in row)

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return Path(self.home, "pgbouncer.log").read_text(errors="replace")[-4000:]
        return ""

    def close(self) -> None:
        """End the pooler (its server connections close) and remove its files."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # immediate shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        shutil.rmtree(self.home, ignore_errors=True)
