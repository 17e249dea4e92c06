"""`runledger-beat web`: the dashboard served by a real subprocess, driven by Playwright in Debian's chromium."""

from __future__ import annotations

import shutil
import socket
import sys
import urllib.error
import urllib.request

import pytest

from runledger_beat import api

from .procs import Proc, celery_env
from .services import REQUIRE, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, method: str = "GET") -> tuple[int, str]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture
def web(pg_dsn, schema):
    """Start `runledger-beat web` on a free port; yields a function (allow_actions) -> base URL."""
    started: list[Proc] = []

    def start(allow_actions: bool = False) -> str:
        port = _free_port()
        argv = [sys.executable, "-m", "runledger_beat.cli", "--dsn", pg_dsn, "--schema", schema, "web",
                "--port", str(port)] + (["--allow-actions"] if allow_actions else [])
        proc = Proc(argv, celery_env(pg_dsn, schema, "memory://", "unused"), "web")
        started.append(proc)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(base + "/healthz")[0] == 200 or not proc.alive(), timeout=20, message="web to answer")
        assert proc.alive(), proc.log()
        return base

    yield start
    for proc in started:
        proc.stop()


@pytest.fixture
def seeded(db, schema):
    api.create(db, "nightly/report", "proj.report", cron="30 2 * * *", timezone="Europe/Paris", args=["daily"],
               schema=schema)
    api.create(db, "heartbeat", "proj.ping", every="30s", schema=schema)
    db.execute("INSERT INTO beats (id, host, pid, version) VALUES (gen_random_uuid(), 'node-a', 4242, '0.1.0')")
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,"
               " last_error) SELECT gen_random_uuid(), id, name, now() - interval '1 day', job_type, '{}', 'failure',"
               " 'ValueError: boom' FROM job_schedules WHERE name = 'nightly/report'")


def test_read_only_dashboard_pages_and_refused_actions(web, seeded, db):
    base = web()
    code, html = _get(base + "/")
    assert code == 200 and "nightly/report" in html and "heartbeat" in html and "node-a" in html
    code, html = _get(base + "/schedules/nightly%2Freport")
    assert code == 200 and "ValueError: boom" in html and "Europe/Paris" in html and "Pause" not in html
    assert _get(base + "/schedules/nope")[0] == 404
    assert _get(base + "/schedules/heartbeat/pause", method="POST")[0] == 403
    assert db.execute("SELECT is_active FROM job_schedules WHERE name = 'heartbeat'").fetchone()["is_active"]


@pytest.fixture
def chromium():
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if REQUIRE:
            pytest.fail("chromium is not installed (apt-get install chromium)", pytrace=False)
        pytest.skip("chromium is not installed (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_browser_walks_from_the_overview_to_a_schedule_and_pauses_resumes_and_triggers_it(
        web, seeded, db, chromium):
    from playwright.sync_api import expect

    base = web(allow_actions=True)
    page = chromium.new_page()
    page.goto(base + "/")
    expect(page.locator("#beats")).to_contain_text("node-a")
    expect(page.locator("#beats")).to_contain_text("4242")
    rows = page.locator("#schedules tr[data-name]")
    expect(rows).to_have_count(2)
    expect(page.locator('#schedules tr[data-name="heartbeat"]')).to_contain_text("every 30.0 s")

    page.get_by_role("link", name="nightly/report").click()
    expect(page.locator("h1")).to_contain_text("nightly/report")
    expect(page.locator("#state")).to_have_text("active")
    expect(page.locator("#definition")).to_contain_text("cron 30 2 * * *")
    expect(page.locator("#next-fires li")).to_have_count(5)
    expect(page.locator("#history")).to_contain_text("failure")
    expect(page.locator("#history")).to_contain_text("ValueError: boom")

    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#state")).to_have_text("paused")
    expect(page.locator("#next-fires")).to_contain_text("none (paused)")
    assert db.execute("SELECT is_active FROM job_schedules WHERE name = 'nightly/report'").fetchone()["is_active"] \
        is False

    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#state")).to_have_text("active")

    page.get_by_role("button", name="Trigger now").click()
    expect(page.locator("#history")).to_contain_text("manual")
    assert db.execute("SELECT count(*) AS n FROM jobs WHERE stage = 'manual' AND schedule_name = 'nightly/report'"
                      ).fetchone()["n"] == 1
