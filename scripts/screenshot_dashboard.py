"""Screenshot the dashboard's schedules page into docs/img/dashboard.png (for the docs' dashboard page).

    python scripts/screenshot_dashboard.py [--dsn DSN] [--out docs/img/dashboard.png] [--page /]

Creates a throwaway schema with a few sample schedules and ledger rows, serves
`runledger-beat web` on a free port, photographs the page in headless Chromium
(Debian's /usr/bin/chromium through Playwright, 1200x700) and drops the schema.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runledger_beat import api  # noqa: E402
from runledger_beat.db import connect, drop_schema, migrate  # noqa: E402

SAMPLES = [
    dict(name="billing/invoices", task="billing.tasks.send_invoices", cron="0 2 * * *", timezone="Europe/Paris"),
    dict(name="cache/warm", task="web.tasks.warm_cache", every="30s"),
    dict(name="reports/weekly", task="reports.tasks.weekly", cron="0 8 * * mon", timezone="America/New_York"),
    dict(name="search/reindex", task="search.tasks.reindex", every="15m"),
    dict(name="heartbeat", task="ops.tasks.ping", every="5s"),
]


def _seed(conn: psycopg.Connection, schema: str) -> None:
    for sample in SAMPLES:
        api.create(conn, schema=schema, **sample)
    api.pause(conn, "reports/weekly", schema=schema)
    conn.execute("INSERT INTO beats (id, host, pid, version, preparing) VALUES"
                 " (gen_random_uuid(), 'beat-a', 4211, '0.1.0', true),"
                 " (gen_random_uuid(), 'beat-b', 5120, '0.1.0', false)")
    # twenty past fires each, with small, varying lags; the newest of search/reindex failed
    conn.execute("""
        INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,
                          sent_at, started_at, finished_at, worker)
        SELECT gen_random_uuid(), s.id, s.name, now() - make_interval(mins => g * 15), s.job_type, '{}',
               CASE WHEN s.name = 'search/reindex' AND g = 1 THEN 'failure' ELSE 'success' END,
               now() - make_interval(mins => g * 15) + make_interval(secs => 0.004 + (g % 7) * 0.003),
               now() - make_interval(mins => g * 15) + make_interval(secs => 0.05),
               now() - make_interval(mins => g * 15) + make_interval(secs => 1.2 + g % 3),
               'celery@worker-' || (g % 2 + 1)
          FROM job_schedules s, generate_series(1, 20) g
         WHERE s.is_active""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(url: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"the dashboard did not answer at {url}")


def _shoot(url: str, out: Path, chromium: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 700})
        page.goto(url)
        page.screenshot(path=str(out))
        browser.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", default=os.environ.get("RUNLEDGER_TEST_DSN", "postgresql://postgres@127.0.0.1:5432/test"))
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "dashboard.png"))
    parser.add_argument("--page", default="/", help="which page to photograph (default /)")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    schema = f"rl_screenshot_{uuid.uuid4().hex[:8]}"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with connect(args.dsn, "public", autocommit=False) as conn:
        migrate(conn, schema)
    server = None
    try:
        with connect(args.dsn, schema, autocommit=True) as conn:
            _seed(conn, schema)
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k != "RUNLEDGER_WEB_TOKEN"}
        env["RUNLEDGER_WEB_TOKEN"] = uuid.uuid4().hex  # shows the "Log in" link, as a writable dashboard does
        server = subprocess.Popen([sys.executable, "-m", "runledger_beat.cli", "--dsn", args.dsn, "--schema", schema,
                                   "web", "--port", str(port)], env=env, cwd=ROOT)
        base = f"http://127.0.0.1:{port}"
        _wait(base + "/healthz")
        _shoot(base + args.page, out, args.chromium)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            drop_schema(conn, schema)
    print(f"{out} ({out.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
