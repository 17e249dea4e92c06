"""Chaos soak: real beats and workers under random faults, then a checker that every slot fired once.

Everything faulted is private and on ports of its own: a Postgres primary with a synchronous standby
(tests/support/replica.py), a RabbitMQ node (tests/support/private.py), a TCP proxy between each beat and each
Postgres node (tests/support/netcut.py). The workers (bench/chaosapp.py, with the runledger hook) record every
delivery and every run into a database of the soak's own on the shared server, out of the faults' reach.

Schedules: every-second ones, every-minute ones, and a burst of ``--burst`` schedules due at second 15 of each
minute. While they fire, one fault at a time, in random order (each kind once per round), with a random pause
between: SIGKILL of a beat (restarted after a few seconds), SIGSTOP of a beat (``--stop-seconds``), a partition
between a beat and Postgres, a Postgres restart, a failover to the standby (a new standby is then built), a
RabbitMQ stop (``--broker-seconds``). At the end the schedules stop, the backlog drains, and bench/chaos_check.py
prints its table; the exit status is 1 on any loss or double execution.

    flock /tmp/runledger-heavy.lock .venv/bin/python bench/chaos.py --minutes 30
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from bench.chaos_check import check, markdown  # noqa: E402
from bench.chaosapp import RECORD_DDL  # noqa: E402
from bench.common import DSN, emit  # noqa: E402
from runledger_beat.db import connect, migrate  # noqa: E402
from tests.support.netcut import Proxy  # noqa: E402
from tests.support.private import RabbitNode  # noqa: E402
from tests.support.procs import ROOT, Proc  # noqa: E402
from tests.support.replica import ReplicaPair  # noqa: E402
from tests.support.services import wait_for, with_database  # noqa: E402

KINDS = ("beat_kill", "beat_stop", "partition", "pg_restart", "failover", "rabbit_stop")
QUEUE = "chaos"
SCHEMA = "runledger"


def _now() -> datetime:
    return datetime.now(timezone.utc)


class Beat:
    """One beat slot: its proxies to the two Postgres nodes and its current process."""

    def __init__(self, index: int, ports: tuple[int, int], env: dict[str, str]) -> None:
        self.index = index
        self.proxies = [Proxy(("127.0.0.1", port)) for port in ports]
        self.env = dict(env, RUNLEDGER_DSN=ReplicaPair.dsn_via(*(p.port for p in self.proxies)))
        self.proc: Proc | None = None

    def start(self) -> None:
        argv = [sys.executable, "-m", "celery", "-A", "bench.chaosapp", "beat", "-S", "runledger", "--loglevel",
                "INFO", "--pidfile=", "-s", os.devnull]
        self.proc = Proc(argv, self.env, f"chaos-beat{self.index}")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill(signal.SIGCONT)
            self.proc.stop()
        for proxy in self.proxies:
            proxy.close()


class Soak:
    """The services, processes and faults of one soak run."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.faults: list[dict[str, Any]] = []
        self.pair: ReplicaPair | None = None
        self.rabbit: RabbitNode | None = None
        self.beats: list[Beat] = []
        self.workers: list[Proc] = []
        self.record_dsn = ""
        self.rebuilding: threading.Thread | None = None

    # -- setup ------------------------------------------------------------------

    def setup(self) -> None:
        self.pair = ReplicaPair()
        self.rabbit = RabbitNode()
        if self.args.record_dsn:
            self.record_dsn = self.args.record_dsn
        else:
            name = f"runledger_chaos_{os.getpid()}"
            with psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            self.record_dsn = with_database(DSN, name)
        with psycopg.connect(self.record_dsn, autocommit=True) as conn:
            conn.execute(RECORD_DDL)
        with connect(self.pair.dsn, "public") as conn:
            migrate(conn, SCHEMA)
        env = dict(os.environ, CHAOS_BROKER_URL=self.rabbit.url, CHAOS_QUEUE=QUEUE, CHAOS_RECORD_DSN=self.record_dsn,
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
        self.beats = [Beat(i, self.pair.ports, env) for i in range(self.args.beats)]
        worker_env = dict(env, RUNLEDGER_DSN=self.pair.dsn)
        for i in range(self.args.workers):
            argv = [sys.executable, "-m", "celery", "-A", "bench.chaosapp", "worker", "--loglevel", "INFO",
                    "-c", str(self.args.concurrency), "-P", "prefork", "-Q", QUEUE, "--without-gossip",
                    "--without-mingle", "--without-heartbeat", "-n", f"chaos{i}-{os.getpid()}@%h"]
            self.workers.append(Proc(argv, worker_env, f"chaos-worker{i}"))

    def schedule(self) -> dict[str, tuple[datetime, int]]:
        """Insert the schedules; their first instants and steps by kind."""
        with psycopg.connect(self.pair.dsn, autocommit=True) as conn:
            now = conn.execute("SELECT now()").fetchone()[0]
        start = now.replace(microsecond=0) + timedelta(seconds=self.args.lead)
        minute = start.replace(second=0) + timedelta(minutes=1)
        burst = minute - timedelta(minutes=1) + timedelta(seconds=15)
        if burst < start:
            burst += timedelta(minutes=1)
        kinds = {"sec": (start, 1), "min": (minute, 60), "burst": (burst, 60)}
        crons = {"sec": "* * * * * *", "min": "0 * * * * *", "burst": "15 * * * * *"}
        counts = {"sec": self.args.every_second, "min": self.args.every_minute, "burst": self.args.burst}
        with psycopg.connect(self.pair.dsn, autocommit=True) as conn, conn.cursor().copy(
                f'COPY "{SCHEMA}".job_schedules (id, name, job_type, payload_template, kind, cron_expr, next_fire_at)'
                " FROM STDIN") as copy:
            for kind, n in counts.items():
                for i in range(n):
                    name = f"{kind}-{i}"
                    template = json.dumps({"args": [name], "kwargs": {}})
                    copy.write_row((uuid.uuid4(), name, "chaos.tick", template, "cron", crons[kind], kinds[kind][0]))
        return kinds

    # -- faults -----------------------------------------------------------------

    def _beat(self) -> Beat:
        return self.rng.choice(self.beats)

    def inject(self, kind: str) -> dict[str, Any]:
        """Inject one fault, wait until it is over; returns its record (start, recovered, what)."""
        start, what = _now(), ""
        if kind == "beat_kill":
            beat = self._beat()
            beat.proc.kill(signal.SIGKILL)
            beat.proc.stop()
            time.sleep(self.args.restart_after)
            beat.start()
            what = f"beat{beat.index} killed, restarted after {self.args.restart_after:g} s"
        elif kind == "beat_stop":
            beat = self._beat()
            beat.proc.kill(signal.SIGSTOP)
            time.sleep(self.args.stop_seconds)
            beat.proc.kill(signal.SIGCONT)
            what = f"beat{beat.index} stopped {self.args.stop_seconds:g} s"
        elif kind == "partition":
            beat = self._beat()
            for proxy in beat.proxies:
                proxy.cut()
            time.sleep(self.args.partition_seconds)
            for proxy in beat.proxies:
                proxy.heal()
            what = f"beat{beat.index} cut from Postgres {self.args.partition_seconds:g} s"
        elif kind == "pg_restart":
            self.pair.restart_primary()
            what = "primary restarted"
        elif kind == "failover":
            if self.rebuilding is not None:
                self.rebuilding.join()
            if self.pair.standby is None or not self.pair.standby.answers():
                self.pair.rebuild_standby()
            self.pair.failover()
            what = f"primary crashed, standby on port {self.pair.primary.port} promoted"
            self.rebuilding = threading.Thread(target=self.pair.rebuild_standby, daemon=True)
            self.rebuilding.start()
        elif kind == "rabbit_stop":
            seconds = self.rng.uniform(*self.args.broker_seconds)
            self.rabbit.stop_app()
            time.sleep(seconds)
            self.rabbit.start_app()
            what = f"RabbitMQ stopped {seconds:.0f} s"
        fault = {"kind": kind, "start": start, "recovered": _now(), "what": what}
        print(f"{fault['start']:%H:%M:%S} {kind}: {what}", flush=True)
        return fault

    def run(self, kinds: tuple[str, ...]) -> dict[str, Any]:
        """Fire, inject faults until the end, drain, check; returns the report."""
        first = self.schedule()
        for beat in self.beats:
            beat.start()
        start = first["sec"][0]
        end = start + timedelta(minutes=self.args.minutes)
        quiet = end - timedelta(seconds=self.args.tail)
        wait_for(lambda: _now() >= start + timedelta(seconds=self.args.warmup), timeout=self.args.lead + 120,
                 interval=0.5, message="the warm-up")
        queue: list[str] = []
        while True:
            if not queue:
                queue = list(kinds)
                self.rng.shuffle(queue)
                if self.args.failover_last and "failover" in queue:
                    queue.remove("failover")
                    queue.append("failover")
            if _now() >= quiet and not self.args.once:
                break
            self.faults.append(self.inject(queue.pop(0)))
            if self.args.once and not queue:
                break
            time.sleep(self.rng.uniform(*self.args.gap))
        end = max(end, self.faults[-1]["recovered"] + timedelta(seconds=self.args.tail)) if self.faults else end
        wait_for(lambda: _now() >= end, timeout=(end - _now()).total_seconds() + 30, interval=0.5,
                 message="the end of the soak")
        self._stop_schedules()
        self._drain(end)
        run = {"start": start, "end": end, "kinds": first, "faults": self.faults}
        report = check(self.pair.dsn, self.record_dsn, run, SCHEMA)
        if self.args.keep:
            self._keep(run)
        return report

    def _stop_schedules(self) -> None:
        def stop() -> bool:
            try:
                with psycopg.connect(self.pair.dsn, autocommit=True) as conn:
                    conn.execute(f'UPDATE "{SCHEMA}".job_schedules SET is_active = false')
                return True
            except psycopg.Error:
                return False
        wait_for(stop, timeout=60, interval=1, message="the schedules stopped")

    def _drain(self, end: datetime) -> None:
        """Wait until every fire before ``end`` is sent and executed (or the drain timeout passes)."""
        def drained() -> bool:
            try:
                with psycopg.connect(self.pair.dsn) as conn:
                    ids = {str(r[0]) for r in conn.execute(
                        f'SELECT id FROM "{SCHEMA}".jobs WHERE scheduled_for < %s AND status <> %s', (end, "skipped"))}
                with psycopg.connect(self.record_dsn) as conn:
                    done = {r[0] for r in conn.execute("SELECT DISTINCT task_id FROM executions")}
                return ids <= done
            except psycopg.Error:
                return False
        with contextlib.suppress(AssertionError):
            wait_for(drained, timeout=self.args.drain, interval=1, message="the backlog executed")

    def _keep(self, run: dict[str, Any]) -> None:
        path = Path(self.args.keep)
        encoded = {"start": run["start"].isoformat(), "end": run["end"].isoformat(),
                   "kinds": {k: (v[0].isoformat(), v[1]) for k, v in run["kinds"].items()},
                   "faults": [dict(f, start=f["start"].isoformat(), recovered=f["recovered"].isoformat())
                              for f in run["faults"]],
                   "ledger_dsn": self.pair.dsn, "record_dsn": self.record_dsn}
        path.write_text(json.dumps(encoded, indent=1))

    def logs(self, tail: int = 3000) -> str:
        """The last lines of every process's log (for a failure report)."""
        parts = []
        for proc in [b.proc for b in self.beats if b.proc] + self.workers:
            parts.append(f"--- {proc.log_path}\n{proc.log()[-tail:]}")
        return "\n".join(parts)

    def close(self) -> None:
        """Stop every process and drop every service of the run (unless kept)."""
        for beat in self.beats:
            beat.close()
        for worker in self.workers:
            worker.stop()
        if self.args.keep:
            return
        if self.rebuilding is not None:
            self.rebuilding.join()
        for thing in (self.rabbit, self.pair):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.close()
        if self.record_dsn and not self.args.record_dsn:
            name = sql.Identifier(self.record_dsn.rsplit("/", 1)[1])
            with contextlib.suppress(psycopg.Error), psycopg.connect(DSN, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(name))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=5, help="length of the soak (faults stop --tail s before)")
    p.add_argument("--beats", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=3)
    p.add_argument("--every-second", type=int, default=5, help="every-second schedules")
    p.add_argument("--every-minute", type=int, default=5, help="every-minute schedules")
    p.add_argument("--burst", type=int, default=1000, help="schedules due at second 15 of each minute")
    p.add_argument("--kinds", default=",".join(KINDS), help="fault kinds, comma-separated")
    p.add_argument("--once", action="store_true",
                   help="each fault kind once, however long the faults take (the end moves to --tail past the last"
                        " one's recovery), then only fire until the end")
    p.add_argument("--failover-last", action="store_true", help="the failover last in each round")
    p.add_argument("--gap", type=float, nargs=2, default=(20, 40), help="seconds between faults (min max)")
    p.add_argument("--stop-seconds", type=float, default=20, help="how long a beat stays SIGSTOPped")
    p.add_argument("--partition-seconds", type=float, default=20)
    p.add_argument("--broker-seconds", type=float, nargs=2, default=(10, 60), help="RabbitMQ stop (min max)")
    p.add_argument("--restart-after", type=float, default=5, help="seconds before a killed beat is restarted")
    p.add_argument("--lead", type=float, default=10, help="seconds from setup to the first instant")
    p.add_argument("--warmup", type=float, default=20, help="seconds of firing before the first fault")
    p.add_argument("--tail", type=float, default=40, help="seconds of firing after the last fault")
    p.add_argument("--drain", type=float, default=180, help="seconds to wait for the backlog to execute")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--keep", default="", help="write the run to this JSON file and keep the services")
    p.add_argument("--record-dsn", default="",
                   help="an empty database, the caller's, for the workers' record of runs (default: the soak creates"
                        " one on the shared server and drops it)")
    return p


def soak(args: argparse.Namespace) -> dict[str, Any]:
    """Run one soak with ``args`` (see ``parser``); returns the checker's report plus the faults."""
    kinds = tuple(k for k in args.kinds.split(",") if k)
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise SystemExit(f"--kinds: unknown fault kind(s) {sorted(unknown)}; known: {', '.join(KINDS)}")
    run = Soak(args)
    try:
        run.setup()
        report = run.run(kinds)
        report["faults"] = [dict(f, start=f"{f['start']:%H:%M:%S}", recovered=f"{f['recovered']:%H:%M:%S}")
                            for f in run.faults]
        if not report["ok"]:
            report["logs"] = run.logs()
        return report
    finally:
        run.close()


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    began = time.monotonic()
    report = soak(args)
    print(markdown(report))
    for problem in report["problems"]:
        print("problem:", problem)
    emit({"bench": "chaos", "minutes": args.minutes, "beats": args.beats, "burst": args.burst, "seed": args.seed,
          "ok": report["ok"], "wall_s": round(time.monotonic() - began), "table": report["table"],
          "ledger_rows": report["ledger_rows"], "executions": report["executions"]})
    if not report["ok"]:
        print(report.get("logs", "")[-20000:])
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
