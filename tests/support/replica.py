"""A private PostgreSQL primary with a synchronous standby, on ports of their own, that can fail over.

Two Debian clusters (``pg_createcluster``; the standby made by ``pg_basebackup -R``). ``dsn`` is a libpq
multi-host DSN with ``target_session_attrs=read-write``: clients reach whichever node is primary.
``failover()`` kills the primary (immediate stop, as a crash) and promotes the standby; ``rebuild_standby()``
drops the crashed node and makes a new standby of the new primary on its port, so another failover can follow.
Replication is synchronous (``synchronous_standby_names = '*'``) while a standby streams: a commit the primary
acknowledged is on the standby, so a failover loses no committed row. Everything is dropped by ``close()``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid

import psycopg

from .private import free_port
from .services import missing, wait_for


def _run(*argv: str, timeout: float = 120) -> None:
    subprocess.run(list(argv), check=True, capture_output=True, timeout=timeout)


class Node:
    """One Debian cluster of the pair: its name, port and data directory."""

    def __init__(self, version: str, port: int) -> None:
        self.version, self.port = version, port
        self.name = f"rlrep{uuid.uuid4().hex[:8]}"
        self.data = f"/var/lib/postgresql/{version}/{self.name}"
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def create(self, start: bool) -> None:
        _run("pg_createcluster", self.version, self.name, "-p", str(self.port), *(["--start"] if start else []),
             "--", "--auth-local=trust", "--auth-host=trust")

    def ctl(self, action: str, *args: str) -> None:
        _run("pg_ctlcluster", "--skip-systemctl-redirect", *args, self.version, self.name, action)

    def answers(self, writable: bool = False) -> bool:
        """Whether the node takes connections (and, with ``writable``, is out of recovery)."""
        try:
            with psycopg.connect(self.dsn, connect_timeout=2, autocommit=True) as conn:
                return not writable or not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        except psycopg.Error:
            return False

    def sql(self, statement: str) -> None:
        with psycopg.connect(self.dsn, connect_timeout=5, autocommit=True) as conn:
            conn.execute(statement)

    def drop(self) -> None:
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], capture_output=True, timeout=120)


class ReplicaPair:
    """A primary and a synchronous standby; see the module docstring."""

    def __init__(self) -> None:
        if shutil.which("pg_createcluster") is None or shutil.which("pg_basebackup") is None:
            missing("PostgreSQL (private primary and standby)", "Debian's postgresql-common is not installed")
        self.version = sorted(os.listdir("/etc/postgresql"))[-1]
        self.ports = (free_port(), free_port())
        self.primary = Node(self.version, self.ports[0])
        self.standby: Node | None = None
        self.retired: Node | None = None  # the crashed primary of the last failover, until a new standby is built
        self.primary.create(start=True)
        wait_for(self.primary.answers, timeout=60, message="the private primary answering")
        self.rebuild_standby()

    @property
    def dsn(self) -> str:
        """Both nodes, the writable one chosen by libpq."""
        return self.dsn_via(*self.ports)

    @staticmethod
    def dsn_via(*ports: int) -> str:
        """A multi-host DSN over ``ports`` (the nodes' own, or proxies in front of them)."""
        hosts = ",".join(f"127.0.0.1:{port}" for port in ports)
        return f"postgresql://postgres@{hosts}/postgres?target_session_attrs=read-write&connect_timeout=3"

    def rebuild_standby(self, attempts: int = 3) -> None:
        """A new standby of the primary on the other port, streaming synchronously (a base backup cut short, by
        a restart of the primary, is made again)."""
        for attempt in range(attempts):
            try:
                self._build_standby()
                return
            except (subprocess.SubprocessError, OSError, psycopg.Error, AssertionError):
                if attempt == attempts - 1:
                    raise

    def _build_standby(self) -> None:
        port = self.ports[1] if self.primary.port == self.ports[0] else self.ports[0]
        node = Node(self.version, port)
        for gone in (self.standby, self.retired):
            if gone is not None:
                gone.drop()
        self.retired = None
        self.standby = node
        node.create(start=False)
        shutil.rmtree(node.data)
        _run("pg_basebackup", "-D", node.data, "-R", "-X", "stream", "-c", "fast",
             "-d", f"host=127.0.0.1 port={self.primary.port} user=postgres")
        _run("chown", "-R", "postgres:postgres", node.data)
        os.chmod(node.data, 0o700)
        node.ctl("start")
        wait_for(node.answers, timeout=60, message="the private standby answering")
        wait_for(self._streaming, timeout=60, message="the standby streaming")
        self.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        self.primary.sql("SELECT pg_reload_conf()")

    def _streaming(self) -> bool:
        with psycopg.connect(self.primary.dsn, connect_timeout=3, autocommit=True) as conn:
            return bool(conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                        .fetchone()[0])

    def restart_primary(self) -> None:
        """Restart the primary (every session ends); the standby reconnects by itself."""
        self.primary.ctl("restart", "-m", "fast")
        wait_for(lambda: self.primary.answers(writable=True), timeout=60, message="the primary answering again")

    def failover(self) -> None:
        """Crash the primary and promote the standby; until ``rebuild_standby`` the new primary runs alone
        (commits no longer wait for a standby)."""
        if self.standby is None or not self.standby.answers():
            raise RuntimeError("no standby to promote")
        old, self.primary, self.standby = self.primary, self.standby, None
        old.ctl("stop", "-m", "immediate")
        self.primary.ctl("promote")
        wait_for(lambda: self.primary.answers(writable=True), timeout=60, message="the promoted standby writable")
        self.primary.sql("ALTER SYSTEM RESET synchronous_standby_names")
        self.primary.sql("SELECT pg_reload_conf()")
        self.retired = old  # dropped by rebuild_standby, which needs its port

    def close(self) -> None:
        """Stop and drop both clusters."""
        for node in (self.standby, self.primary, self.retired):
            if node is not None:
                with contextlib.suppress(subprocess.SubprocessError, OSError):
                    node.drop()
