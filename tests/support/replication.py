"""A primary and a synchronous standby of the test's own (both private: other tests' services are untouched), for
failover tests.

The primary is a ``PostgresCluster`` (private.py). The standby is a ``pg_basebackup -R`` copy of it in a
directory of its own, on another port, run with ``pg_ctl`` as the postgres user; once it streams, the primary
names it in ``synchronous_standby_names``, so every commit the primary acknowledges is on the standby too.
``promote()`` makes the standby a primary; ``ha_dsn`` is the multi-host DSN an HA deployment uses
(``target_session_attrs=read-write``: the connection goes to whichever host accepts writes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from .private import PostgresCluster, _user_exists, free_port
from .services import missing, wait_for


def _as_postgres(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run a PostgreSQL command as the postgres user when we are root (the server refuses to run as root)."""
    if os.geteuid() == 0:
        argv = ["runuser", "-u", "postgres", "--", *argv]
    return subprocess.run(argv, check=True, capture_output=True, timeout=timeout)


class StandbyPair:
    """``primary`` (a PostgresCluster) and a synchronous streaming standby; ``close()`` removes both."""

    def __init__(self) -> None:
        if os.geteuid() == 0 and not _user_exists("postgres"):
            missing("PostgreSQL standby", "running as root and there is no postgres user")
        self.primary = PostgresCluster()
        self.bin = f"/usr/lib/postgresql/{self.primary.version}/bin"
        if not os.path.exists(f"{self.bin}/pg_ctl"):
            self.primary.close()
            missing("PostgreSQL standby", f"{self.bin}/pg_ctl is not installed")
        self.port = free_port()
        self.home = tempfile.mkdtemp(prefix="runledger-standby-")
        self.data = f"{self.home}/data"
        self.started = False
        try:
            if os.geteuid() == 0:
                subprocess.run(["chown", "postgres", self.home], check=True, capture_output=True)
            _as_postgres([f"{self.bin}/pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary.port),
                          "-U", "postgres", "-D", self.data, "-R", "-X", "stream", "-c", "fast"])
            Path(f"{self.home}/postgresql.conf").write_text(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self.home}'\n"
                f"hba_file = '{self.home}/pg_hba.conf'\nhot_standby = on\nfsync = off\n"
                f"include_if_exists = '{self.data}/postgresql.auto.conf'\n")
            Path(f"{self.home}/pg_hba.conf").write_text(
                "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n")
            if os.geteuid() == 0:
                subprocess.run(["chown", "-R", "postgres", self.home], check=True, capture_output=True)
            _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-l", f"{self.home}/log", "-w", "-t", "60",
                          "-o", f"-c config_file={self.home}/postgresql.conf", "start"])
            self.started = True
            self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
            with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
                wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
                         .fetchone()[0] == 1, timeout=60, message="the standby streaming")
                conn.execute("ALTER SYSTEM SET synchronous_standby_names = '*'")
                conn.execute("SELECT pg_reload_conf()")
                wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'")
                         .fetchone()[0] == 1, timeout=30, message="the standby synchronous")
        except BaseException:
            self.close()
            raise

    def ha_dsn(self, dbname: str = "postgres") -> str:
        """The multi-host DSN of the pair: primary first, then the standby; read-write sessions only."""
        return (f"host=127.0.0.1,127.0.0.1 port={self.primary.port},{self.port} dbname={dbname} user=postgres "
                "target_session_attrs=read-write connect_timeout=3")

    def promote(self) -> None:
        """Promote the standby and wait until it accepts writes."""
        _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-w", "-t", "60", "promote"])

        def writable() -> bool:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=2) as conn:
                return not conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        wait_for(writable, timeout=60, message="the promoted standby accepting writes")

    def demote_primary(self) -> None:
        """Leave the primary up but refusing writes, as a demoted node does: its sessions' next write fails with
        SQLSTATE 25006 (read-only transaction) and read-write connections pass it over. Returns once the
        transactions that were writing when it turned read-only have ended (a switchover drains them before the
        promotion: a commit on the old primary after it would wait for its synchronous standby for ever)."""
        with psycopg.connect(self.primary.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
            conn.execute("SELECT pg_reload_conf()")
            wait_for(lambda: conn.execute("SELECT count(*) FROM pg_stat_activity WHERE backend_xid IS NOT NULL"
                                          " AND pid <> pg_backend_pid()").fetchone()[0] == 0,
                     timeout=30, interval=0.05, message="the writing transactions drained")

    def fail_over(self, old_primary: str) -> None:
        """The standby takes over: "stopped", the primary is lost (promote, then stop the old one); "read-only", a
        switchover (the primary refuses writes first, then the standby is promoted)."""
        if old_primary == "stopped":
            self.promote()
            self.primary.stop()
        else:
            self.demote_primary()
            self.promote()

    def log(self) -> str:
        with contextlib.suppress(OSError):
            return Path(f"{self.home}/log").read_text(errors="replace")[-4000:]
        return ""

    def close(self) -> None:
        """Stop the standby, drop the primary, remove the files."""
        if self.started:
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                _as_postgres([f"{self.bin}/pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop"], timeout=60)
            self.started = False
        shutil.rmtree(self.home, ignore_errors=True)
        self.primary.close()
