"""Operator surfaces at a million schedules: the dashboard, the JSON API, a search, one schedule's page and
`runledger-beat list`, timed over a real `runledger-beat web` and real command-line processes.

A schema of its own gets N daily cron schedules (default 1,000,000) written by raw COPY, spread over the day
(``M H * * *``, 100 tasks), plus a ledger of 100 fires for each of 1,000 of them, then ANALYZE. Each surface is
asked ``--repeat`` times after one untimed warm-up; the figures are the median and min–max of the wall time from
request to last byte (for the command line: process start to exit). Baselines measured in the same run: an HTTP
round trip to the same server's ``/healthz``, and a Python process that connects and runs ``SELECT 1``.

    .venv/bin/python bench/bench_surfaces.py                      # 1,000,000 schedules, 5 repeats
    .venv/bin/python bench/bench_surfaces.py --n 100000 --repeat 3
    .venv/bin/python bench/bench_surfaces.py --schema NAME        # an existing, filled schema (kept as it is)

Run it alone (flock /tmp/runledger-heavy.lock ...): the fill writes about 1 GB. The schema is dropped at the end
unless it was given or --keep is.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import quote

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import DSN, ROOT, connect, drop_schema, emit, fresh_schema, start, stop  # noqa: E402

TASKS = 100
LEDGER_SCHEDULES = 1000
LEDGER_FIRES = 100


def name_of(i: int) -> str:
    return f"daily-{i:07d}"


def fill(schema: str, n: int) -> dict:
    """COPY ``n`` daily schedules spread over the day and a ledger for LEDGER_SCHEDULES of them; ANALYZE."""
    began = time.perf_counter()
    with connect(DSN, schema, autocommit=True) as db:
        midnight = db.execute("SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS t"
                              ).fetchone()["t"]
        now = time.time()
        with db.cursor().copy("COPY job_schedules (id, name, job_type, kind, cron_expr, next_fire_at) FROM STDIN") \
                as copy:
            for i in range(n):
                minute_of_day = i % 1440
                at = midnight.timestamp() + minute_of_day * 60
                if at <= now:
                    at += 86400
                copy.write_row((uuid.uuid4(), name_of(i), f"bench.tasks.t{i % TASKS}", "cron",
                                f"{minute_of_day % 60} {minute_of_day // 60} * * *",
                                time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime(at))))
        copied = time.perf_counter() - began
        step = max(n // LEDGER_SCHEDULES, 1)
        db.execute(
            "INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,"
            " created_at, sent_at, started_at, finished_at)"
            " SELECT gen_random_uuid(), s.id, s.name, now() - make_interval(days => k), s.job_type, '{}',"
            " 'scheduled', 'success', now() - make_interval(days => k), now() - make_interval(days => k)"
            " + interval '5 ms', now() - make_interval(days => k) + interval '20 ms',"
            " now() - make_interval(days => k) + interval '1 s'"
            " FROM job_schedules s CROSS JOIN generate_series(1, %s) AS k"
            " WHERE s.name = ANY(%s)",
            (LEDGER_FIRES, [name_of(i) for i in range(0, n, step)][:LEDGER_SCHEDULES]))
        db.execute("VACUUM ANALYZE job_schedules")
        db.execute("ANALYZE jobs")
        count = db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"]
        ledger = db.execute("SELECT count(*) AS n FROM jobs").fetchone()["n"]
        filled = time.perf_counter() - began
        index = db.execute("SELECT coalesce(to_regclass('job_schedules_search_trgm_idx'),"
                           " to_regclass('job_schedules_name_prefix_idx'))::text AS name").fetchone()["name"]
        build = time.perf_counter()
        db.execute(f'REINDEX INDEX "{index}"')  # what migration 0009 costs at this size (writes wait meanwhile)
        build = time.perf_counter() - build
    return {"schedules": count, "ledger_rows": ledger, "copy_s": round(copied, 1), "fill_s": round(filled, 1),
            "search_index": index, "search_index_build_s": round(build, 2)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> float:
    """Seconds from request to the last byte of a 200 answer."""
    began = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        if response.status != 200:
            raise RuntimeError(f"{url}: {response.status}")
    return time.perf_counter() - began


def run(argv: list[str], env: dict[str, str]) -> float:
    """Seconds from process start to a successful exit."""
    began = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, timeout=300)
    elapsed = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{argv}: exit {done.returncode}: {done.stderr.decode(errors='replace')[-500:]}")
    return elapsed


def timed(what: str, probe, repeat: int, target: float | None, baseline: dict | None = None) -> dict:
    """One untimed warm-up, then ``repeat`` timings: median, min and max, the ratio to the baseline's median."""
    probe()
    runs = [probe() for _ in range(repeat)]
    median = statistics.median(runs)
    result = {"what": what, "median_s": round(median, 4), "min_s": round(min(runs), 4),
              "max_s": round(max(runs), 4), "runs": repeat}
    if target is not None:
        result.update(target_s=target, met=median <= target)
    if baseline is not None:
        result.update(baseline=baseline["what"], ratio_to_baseline=round(median / baseline["median_s"], 1))
    return emit(result)


def probes(schema: str, n: int) -> tuple[str, str]:
    """(a schedule with ledger rows, else the first; the schedule in the middle by name), read before timing."""
    with connect(DSN, schema, autocommit=True) as db:
        one = db.execute("SELECT schedule_name AS name FROM jobs WHERE schedule_id IS NOT NULL LIMIT 1").fetchone() \
            or db.execute("SELECT name FROM job_schedules ORDER BY name LIMIT 1").fetchone()
        middle = db.execute("SELECT name FROM job_schedules ORDER BY name OFFSET %s LIMIT 1", (n // 2,)).fetchone()
    return one["name"], middle["name"]


def surfaces(schema: str, repeat: int, n: int) -> list[dict]:
    env = dict(os.environ, RUNLEDGER_DSN=DSN, PYTHONPATH=str(ROOT))
    env.pop("RUNLEDGER_WEB_TOKEN", None)
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="bench-surfaces-", suffix=".log")[1])
    web = start([sys.executable, "-m", "runledger_beat.cli", "--schema", schema, "web", "--port", str(port)], env, log)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while True:
            try:
                fetch(base + "/healthz")
                break
            except OSError:
                if time.time() > deadline or web.poll() is not None:
                    raise RuntimeError(log.read_text(errors="replace")[-2000:]) from None
                time.sleep(0.1)
        http = timed("HTTP round trip to /healthz (baseline)", lambda: fetch(base + "/healthz"), repeat, None)
        cli_base = timed("python: connect and SELECT 1 (baseline)", lambda: run(
            [sys.executable, "-c", f"import psycopg; psycopg.connect({DSN!r}).execute('SELECT 1')"], env),
            repeat, None)
        one, middle = (quote(name, safe="") for name in probes(schema, n))
        cli = [sys.executable, "-m", "runledger_beat.cli", "--schema", schema]
        return [http, cli_base,
                timed("dashboard /", lambda: fetch(base + "/"), repeat, 2.0, http),
                timed(f"dashboard /?after={middle} (a page in the middle)",
                      lambda: fetch(f"{base}/?after={middle}"), repeat, 2.0, http),
                timed("/api/schedules?limit=100", lambda: fetch(base + "/api/schedules?limit=100"), repeat, 0.5, http),
                timed("/api/schedules?limit=1000", lambda: fetch(base + "/api/schedules?limit=1000"), repeat, None,
                      http),
                timed(f"/api/schedules?q={middle[-6:]} (name substring, few matches)",
                      lambda: fetch(f"{base}/api/schedules?q={middle[-6:]}"), repeat, 1.0, http),
                timed("/api/schedules?q=tasks.t42 (task substring, 1% of the schedules)",
                      lambda: fetch(base + "/api/schedules?q=tasks.t42"), repeat, 1.0, http),
                timed("dashboard /?q=tasks.t42", lambda: fetch(base + "/?q=tasks.t42"), repeat, 1.0, http),
                timed(f"one schedule's page /schedules/{one} ({LEDGER_FIRES} fires in the ledger)",
                      lambda: fetch(f"{base}/schedules/{one}"), repeat, 0.5, http),
                timed("/problems", lambda: fetch(base + "/problems"), repeat, None, http),
                timed("runledger-beat list --limit 100 --json", lambda: run([*cli, "list", "--limit", "100", "--json"],
                                                                            env), repeat, 3.0, cli_base),
                timed("runledger-beat stats --limit 100 --json", lambda: run(
                    [*cli, "stats", "--limit", "100", "--json"], env), repeat, None, cli_base)]
    finally:
        stop([web])
        log.unlink(missing_ok=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="schedules to write (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=5, help="timings per surface (default 5)")
    parser.add_argument("--schema", help="an existing, filled schema: nothing is written or dropped")
    parser.add_argument("--keep", action="store_true", help="keep the schema this run fills")
    args = parser.parse_args()
    schema = args.schema or fresh_schema()
    try:
        if args.schema is None:
            emit({"what": "fill", "schema": schema, **fill(schema, args.n)})
        with connect(DSN, schema, autocommit=True) as db:
            n = db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"]
            mode = db.execute("SELECT to_regclass('job_schedules_search_trgm_idx') IS NOT NULL AS t").fetchone()["t"]
        emit({"what": "schema", "schema": schema, "schedules": n, "search": "substring" if mode else "prefix"})
        results = surfaces(schema, args.repeat, n)
        emit({"what": "summary", "all_targets_met": all(r.get("met", True) for r in results)})
    finally:
        if args.schema is None and not args.keep:
            drop_schema(schema)


if __name__ == "__main__":
    main()
