"""`runledger-beat web`: the dashboard served by a real subprocess, driven by Playwright in Debian's chromium.

Acceptance (issue 13, item 3):
- the schedules page lists schedules and shows a CLI change after a reload:
  test_schedules_page_lists_schedules_and_shows_a_cli_change_after_reload
- pause from the page reaches a running beat within a second:
  test_pause_from_the_page_reaches_a_running_beat_within_a_second
- a write without the token is refused (403) and changes nothing:
  test_read_only_dashboard_shows_everything_and_refuses_every_write,
  test_writes_without_the_token_or_the_session_and_csrf_are_refused
- a schedule named <script>alert(1)</script> renders as text:
  test_a_schedule_named_like_a_script_renders_as_text
- login with the token, trigger from the page creates a manual ledger row:
  test_login_then_trigger_from_the_page_creates_a_manual_row
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from runledger_beat import api, cli
from runledger_beat import web as dashboard
from runledger_beat.db import connect
from runledger_beat.spec import MAX_NOTE_LEN

from .e2e import count, delete_queue, prepare
from .procs import start_beat
from .services import REQUIRE, wait_for
from .webproc import TOKEN, call

SCRIPT_NAME = "<script>alert(1)</script>"


def _get(url: str) -> tuple[int, str]:
    return call(url)


def _form(url: str, fields: dict, opener=None) -> tuple[int, str]:
    return call(url, "POST", urllib.parse.urlencode(fields).encode(),
                 {"Content-Type": "application/x-www-form-urlencoded"}, opener)


def _api_post(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    code, text = call(url, "POST", json.dumps(body).encode() if body is not None else None, headers)
    return code, (json.loads(text) if text.startswith(("{", "[")) else {})


def _path(name: str) -> str:
    return "/schedules/" + urllib.parse.quote(name, safe="")


def _active(db, name: str) -> bool:
    return db.execute("SELECT is_active FROM job_schedules WHERE name = %s", (name,)).fetchone()["is_active"]


def _jobs(db, name: str) -> int:
    return count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = %s", name)


def _clock(db):
    return db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]


@pytest.fixture
def seeded(db, schema):
    api.create(db, "nightly/report", "proj.report", cron="30 2 * * *", timezone="Europe/Paris", args=["daily"],
               schema=schema)
    api.create(db, "heartbeat", "proj.ping", every="30s", schema=schema)
    broken = api.create(db, "broken", "proj.broken", every="1h", schema=schema)
    db.execute("INSERT INTO beats (id, host, pid, version) VALUES (gen_random_uuid(), 'node-a', 4242, '0.1.0')")
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,"
               " last_error, sent_at, started_at, finished_at, worker) SELECT gen_random_uuid(), id, name,"
               " now() - interval '1 day', job_type, '{}', 'failure', 'ValueError: boom',"
               " now() - interval '1 day' + interval '250 milliseconds', now() - interval '1 day' + interval '1 s',"
               " now() - interval '1 day' + interval '3.5 s', 'celery@w1'"
               " FROM job_schedules WHERE name = 'nightly/report'")
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,"
               " last_error, dispatch_attempts) SELECT gen_random_uuid(), id, name, now() - interval '2 hours',"
               " job_type, '{}', 'failed', 'broker refused <b>it</b>', 8 FROM job_schedules WHERE name = 'heartbeat'")
    db.execute("INSERT INTO schedule_faults (schedule_id, failures, last_error, retry_at, quarantined_at)"
               " VALUES (%s, 5, 'bad cron <i>row</i>', now() + interval '1 hour', now())", (broken["id"],))


# ---------------------------------------------------------------------------
# Words, plot and helpers (no server)


def test_timing_words_lag_plot_and_helpers():
    assert dashboard.timing_words({"cron": "0 2 * * *", "timezone": "Europe/Paris"}) == "cron 0 2 * * * (Europe/Paris)"
    assert dashboard.timing_words({"cron": None, "every": 30.0, "timezone": "UTC"}) == "every 30 s"
    assert dashboard.timing_words({"cron": None, "every": 300.0}) == "every 5 min"
    assert dashboard.timing_words({"cron": None, "every": 7200.0}) == "every 2 h"
    assert dashboard.timing_words({"cron": None, "every": 90.0}) == "every 90 s"
    assert dashboard.timing_words({"cron": None, "every": 0.5}) == "every 0.5 s"
    at = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert dashboard.timing_words({"cron": None, "every": None, "at": at}) == "once at 2030-01-02T03:04:05Z"
    assert dashboard.seconds_words(0.012) == "12 ms" and dashboard.seconds_words(2.5) == "2.500 s"
    assert dashboard.seconds_words(200) == "3 min 20 s" and dashboard.seconds_words(None) == "-"
    plot = dashboard.lag_plot([{"lag_seconds": v} for v in (0.01, 0.02, 0.5, 0.0)])
    assert plot["count"] == 4 and len(plot["points"].split()) == 4 and plot["max"] == 0.5
    assert dashboard.lag_plot([])["count"] == 0
    assert dashboard.safe_next("/schedules/x") == "/schedules/x"
    assert dashboard.safe_next("//evil.example") == "/" and dashboard.safe_next("https://evil.example") == "/"
    assert dashboard.session_secret("a") != dashboard.session_secret("b")


def test_allow_actions_flag_is_replaced_by_the_token(pg_dsn, schema, capsys):
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "web", "--allow-actions"]) == 2
    assert "RUNLEDGER_WEB_TOKEN" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Read-only and refused writes (HTTP)


def test_read_only_dashboard_shows_everything_and_refuses_every_write(web, seeded, db):
    base = web()  # no RUNLEDGER_WEB_TOKEN: read-only
    code, html = _get(base + "/")
    assert code == 200 and "nightly/report" in html and "heartbeat" in html
    assert "cron 30 2 * * * (Europe/Paris)" in html and "every 30 s" in html and "every 1 h" in html
    assert "read-only" in html and "Log in" not in html
    code, html = _get(base + "/schedules/nightly%2Freport")
    assert code == 200 and "ValueError: boom" in html and "celery@w1" in html and "2.500 s" in html  # duration
    assert "Pause" not in html and "Trigger" not in html and 'id="lag-plot"' in html
    assert _get(base + "/schedules/nope")[0] == 404
    code, html = _get(base + "/beats")
    assert code == 200 and "node-a" in html and "4242" in html
    code, html = _get(base + "/problems")
    assert code == 200 and "bad cron &lt;i&gt;row&lt;/i&gt;" in html and "quarantined" in html
    assert "broker refused &lt;b&gt;it&lt;/b&gt;" in html

    code, text = _get(base + "/api/schedules")
    rows = json.loads(text)
    assert code == 200 and [r["name"] for r in rows] == ["broken", "heartbeat", "nightly/report"]
    code, text = _get(base + "/api/schedules/nightly/report")
    one = json.loads(text)
    assert code == 200 and one["schedule"]["timezone"] == "Europe/Paris" and len(one["next_fires"]) == 10
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", one["next_fires"][0])
    assert one["history"][0]["status"] == "failure"
    assert _get(base + "/api/schedules/nope")[0] == 404

    jobs_before = _jobs(db, "heartbeat")
    for action in ("pause", "resume", "trigger"):
        assert _api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=None)[0] == 403
        assert _api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token="anything")[0] == 403
        assert _form(f"{base}/schedules/heartbeat/{action}", {"csrf": "x"})[0] == 403
    assert _form(base + "/login", {"token": "anything", "csrf": "x"})[0] == 403
    # --read-only ignores a configured token
    forced = web(token=TOKEN, args=("--read-only",))
    assert _api_post(f"{forced}/api/schedules/heartbeat/pause", {}, token=TOKEN)[0] == 403
    assert "read-only" in _get(forced + "/")[1]
    assert _active(db, "heartbeat") is True and _jobs(db, "heartbeat") == jobs_before


def test_writes_without_the_token_or_the_session_and_csrf_are_refused(web, seeded, db):
    base = web(token=TOKEN)
    jobs_before = _jobs(db, "heartbeat")
    # the JSON API: no header, a wrong token, another scheme
    for action in ("pause", "resume", "trigger"):
        assert _api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=None)[0] == 403
        assert _api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=TOKEN + "x")[0] == 403
        assert call(f"{base}/api/schedules/heartbeat/{action}", "POST", b"",
                     {"Authorization": f"Basic {TOKEN}"})[0] == 403
    # the forms: no session at all, then a session (from /login) without login, then a wrong CSRF token
    assert _form(f"{base}/schedules/heartbeat/pause", {})[0] == 403
    assert _form(f"{base}/schedules/heartbeat/trigger", {"csrf": "guess"})[0] == 403
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    code, html = call(base + "/login", opener=browser)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    assert code == 200 and any(c.name == "runledger_session" for c in jar)
    assert _form(f"{base}/schedules/heartbeat/pause", {"csrf": csrf}, browser)[0] == 403  # not logged in
    assert _form(base + "/login", {"token": TOKEN, "csrf": "wrong"}, browser)[0] == 403  # login CSRF
    _form(base + "/login", {"token": "wrong-token", "csrf": csrf}, browser)
    assert _form(f"{base}/schedules/heartbeat/pause", {"csrf": csrf}, browser)[0] == 403  # wrong token: no login
    assert _active(db, "heartbeat") is True and _jobs(db, "heartbeat") == jobs_before
    # logged in, but a form without the CSRF token is still refused
    code, html = call(base + "/login", opener=browser)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    assert _form(base + "/login", {"token": TOKEN, "csrf": csrf}, browser)[0] == 200
    assert _form(f"{base}/schedules/heartbeat/pause", {}, browser)[0] == 403
    assert _active(db, "heartbeat") is True and _jobs(db, "heartbeat") == jobs_before

    # with the token, the API writes
    code, row = _api_post(f"{base}/api/schedules/heartbeat/pause", None, token=TOKEN)
    assert code == 200 and row["active"] is False and _active(db, "heartbeat") is False
    code, row = _api_post(f"{base}/api/schedules/heartbeat/resume", {}, token=TOKEN)
    assert code == 200 and row["active"] is True and re.search(r"Z$", row["next_fire_at"])
    code, job = _api_post(f"{base}/api/schedules/nightly%2Freport/trigger", {}, token=TOKEN)
    assert code == 200 and job["stage"] == "manual" and job["schedule_name"] == "nightly/report"
    assert _api_post(f"{base}/api/schedules/nope/pause", {}, token=TOKEN)[0] == 404
    assert call(f"{base}/api/schedules/heartbeat/pause", "POST", b"[1]",
                 {"Authorization": f"Bearer {TOKEN}"})[0] == 400


def test_api_pause_note_is_stored(web, seeded, db, schema):
    base = web(token=TOKEN)
    code, row = _api_post(f"{base}/api/schedules/heartbeat/pause", {"note": "deploy <b>freeze</b>"}, token=TOKEN)
    assert code == 200 and row["active"] is False
    assert db.execute("SELECT pause_note FROM job_schedules WHERE name = 'heartbeat'").fetchone()["pause_note"] \
        == "deploy <b>freeze</b>"
    code, html = _get(base + "/schedules/heartbeat")
    assert "deploy &lt;b&gt;freeze&lt;/b&gt;" in html


# ---------------------------------------------------------------------------
# In the browser


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


def _page(chromium):
    """A page that records every dialog (there must be none: the dashboard runs no script)."""
    page = chromium.new_page(viewport={"width": 1200, "height": 700})
    page.dialogs = []

    def on_dialog(dialog):
        page.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return page


def _login(page, base: str, next_path: str = "/") -> None:
    from playwright.sync_api import expect

    page.goto(f"{base}/login?next={urllib.parse.quote(next_path, safe='')}")
    page.fill('input[name="token"]', TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()


def test_schedules_page_lists_schedules_and_shows_a_cli_change_after_reload(web, seeded, db, schema, pg_dsn,
                                                                            chromium):
    from playwright.sync_api import expect

    base = web()
    page = _page(chromium)
    page.goto(base + "/")
    rows = page.locator("#schedules tr[data-name]")
    expect(rows).to_have_count(3)
    nightly = page.locator('#schedules tr[data-name="nightly/report"]')
    expect(nightly.locator(".timing")).to_have_text("cron 30 2 * * * (Europe/Paris)")
    expect(nightly.locator(".last-status")).to_contain_text("failure")
    expect(nightly.locator(".lag")).to_have_text("250 ms")
    heartbeat = page.locator('#schedules tr[data-name="heartbeat"]')
    expect(heartbeat.locator(".timing")).to_have_text("every 30 s")
    assert len(re.findall(r"\d{4}-\d\d-\d\dT", heartbeat.locator(".next").inner_text())) == 3
    expect(page.locator('#schedules tr[data-name="broken"]')).to_contain_text("quarantined")

    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "add", "added-by-cli", "--task", "proj.cli",
                     "--every", "5m"]) == 0
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "pause", "heartbeat"]) == 0
    page.reload()
    expect(rows).to_have_count(4)
    expect(page.locator('#schedules tr[data-name="added-by-cli"] .timing')).to_have_text("every 5 min")
    expect(heartbeat).to_contain_text("paused")

    page.get_by_role("link", name="nightly/report").click()
    expect(page.locator("#name")).to_have_text("nightly/report")
    expect(page.locator("#next-fires li")).to_have_count(10)
    expect(page.locator("#history .duration")).to_have_text("2.500 s")
    expect(page.locator("#history")).to_contain_text("celery@w1")
    expect(page.locator("#lag-plot polyline")).to_have_count(1)
    page.get_by_role("link", name="Beats").click()
    expect(page.locator("#beats")).to_contain_text("node-a")
    page.get_by_role("link", name="Quarantined & failed").click()
    expect(page.locator("#faulted")).to_contain_text("bad cron <i>row</i>")
    expect(page.locator("#failed")).to_contain_text("broker refused <b>it</b>")
    assert page.dialogs == []
    if os.environ.get("RUNLEDGER_SCREENSHOT"):
        page.goto(base + "/")
        page.screenshot(path=os.environ["RUNLEDGER_SCREENSHOT"])


def test_a_schedule_named_like_a_script_renders_as_text(web, db, schema, chromium):
    from playwright.sync_api import expect

    api.create(db, SCRIPT_NAME, "proj.x", every="1h", args=["<img src=x onerror=alert(2)>"], schema=schema)
    db.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,"
               " last_error, worker) SELECT gen_random_uuid(), id, name, now(), job_type, '{}', 'failure',"
               " '<script>alert(3)</script>', '<svg onload=alert(4)>' FROM job_schedules")
    base = web(token=TOKEN)
    page = _page(chromium)
    page.goto(base + "/")
    expect(page.locator("#schedules")).to_contain_text(SCRIPT_NAME)
    assert SCRIPT_NAME in page.inner_text("body")
    page.get_by_role("link", name=SCRIPT_NAME).click()
    expect(page.locator("#name")).to_have_text(SCRIPT_NAME)
    expect(page.locator("#definition")).to_contain_text("<img src=x onerror=alert(2)>")
    expect(page.locator("#history")).to_contain_text("<script>alert(3)</script>")
    expect(page.locator("#history")).to_contain_text("<svg onload=alert(4)>")
    _login(page, base, _path(SCRIPT_NAME))
    expect(page.locator("#name")).to_have_text(SCRIPT_NAME)
    page.get_by_role("button", name="Trigger now").click()  # a POST to the escaped name's URL
    expect(page.locator("#flash")).to_contain_text("triggered")
    for path in ("/", _path(SCRIPT_NAME), "/problems"):
        page.goto(base + path)
        assert page.evaluate("document.querySelectorAll('script, img, svg[onload]').length") == 0
    assert page.dialogs == []
    assert _jobs(db, SCRIPT_NAME) == 2


def test_login_then_trigger_from_the_page_creates_a_manual_row(web, seeded, db, chromium):
    from playwright.sync_api import expect

    base = web(token=TOKEN)
    page = _page(chromium)
    page.goto(base + "/schedules/nightly%2Freport")
    expect(page.get_by_role("button", name="Trigger now")).to_have_count(0)  # not logged in: no buttons
    page.locator("main").get_by_role("link", name="Log in").click()
    page.fill('input[name="token"]', "not-the-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#flash")).to_have_text("wrong token")
    page.fill('input[name="token"]', TOKEN)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#name")).to_have_text("nightly/report")  # back where the login started
    cookie = next(c for c in page.context.cookies() if c["name"] == "runledger_session")
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Strict"

    page.get_by_role("button", name="Trigger now").click()
    expect(page.locator("#flash")).to_contain_text("triggered: manual ledger row")
    expect(page.locator("#history")).to_contain_text("manual")
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE stage = 'manual' AND schedule_name = 'nightly/report'"
                 ) == 1

    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#state")).to_have_text("paused")
    expect(page.locator("#next-fires")).to_contain_text("none (paused)")
    assert _active(db, "nightly/report") is False
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#state")).to_have_text("active")
    assert _active(db, "nightly/report") is True
    page.get_by_role("button", name="Log out").click()
    page.goto(base + "/schedules/nightly%2Freport")
    expect(page.get_by_role("button", name="Trigger now")).to_have_count(0)


@contextlib.contextmanager
def _watch_pause(pg_dsn: str, schema: str, name: str):
    """Poll (every 10 ms, own connection) for the commit of ``name``'s pause; yields [database time first seen]."""
    seen: list = []
    stop = threading.Event()

    def poll():
        with connect(pg_dsn, schema, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute("SELECT is_active, clock_timestamp() AS t FROM job_schedules WHERE name = %s",
                                   (name,)).fetchone()
                if not row["is_active"]:
                    seen.append(row["t"])
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield seen
        thread.join(10)
    finally:
        stop.set()
    assert seen, "the pause never committed"


def test_pause_from_the_page_reaches_a_running_beat_within_a_second(web, db, pg_dsn, schema, amqp_url, chromium):
    from playwright.sync_api import expect

    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    api.create(db, "tick", "rl.record", every="1s", args=["tick"], schema=schema)
    beat = start_beat(env)  # beat_max_loop_interval is 5 s: only NOTIFY can make it react within 1 s
    try:
        base = web(token=TOKEN, env=env)
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'tick'"
                                   " AND sent_at IS NOT NULL") >= 2, timeout=30, message="the beat to fire tick")
        page = _page(chromium)
        _login(page, base, "/schedules/tick")
        expect(page.locator("#state")).to_have_text("active")
        page.fill('#pause-form input[name="note"]', "maintenance <window>")
        clicked = _clock(db)
        with _watch_pause(pg_dsn, schema, "tick") as seen:
            page.get_by_role("button", name="Pause").click()
            expect(page.locator("#state")).to_have_text("paused")
        time.sleep(2.5)  # a window in which a beat that missed the pause would keep firing
        late = db.execute("SELECT scheduled_for, created_at FROM jobs WHERE schedule_name = 'tick'"
                          " AND scheduled_for > %s + interval '1 second' ORDER BY scheduled_for", (clicked,)).fetchall()
        explain = f"clicked {clicked:%T.%f}, pause committed by {seen[0]:%T.%f}, fires after click + 1 s: " + ", ".join(
            f"{r['scheduled_for']:%T.%f} (prepared {r['created_at']:%T.%f})" for r in late)
        # The click reaches the database at once, but a pause waits for the schedule row's lock, which beat
        # holds for the fire it prepared (lookahead): with an every-second schedule that fire is at most
        # about a second after the click, and the beat fires nothing later than a second after the commit.
        assert (seen[0] - clicked).total_seconds() < 2.0, explain
        assert all(r["scheduled_for"] <= seen[0] + timedelta(seconds=1) for r in late), explain
        assert all(r["scheduled_for"] <= clicked + timedelta(seconds=2) for r in late), explain
        print(explain)
        assert _active(db, "tick") is False and beat.alive()
        assert db.execute("SELECT pause_note FROM job_schedules WHERE name = 'tick'").fetchone()["pause_note"] \
            == "maintenance <window>"
        expect(page.locator("#pause-note")).to_contain_text("maintenance <window>")
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)


def test_backfill_from_the_page(web, db, schema, chromium):
    from playwright.sync_api import expect

    api.create(db, "hourly", "proj.hourly", cron="0 * * * *", schema=schema)
    base = web(token=TOKEN)
    page = _page(chromium)
    _login(page, base, "/schedules/hourly")
    end = datetime.now(timezone.utc).replace(minute=30, second=0, microsecond=0) - timedelta(hours=1)
    start = end - timedelta(hours=3)
    page.fill('#backfill-form input[name="from"]', start.strftime("%Y-%m-%dT%H:%M:%S"))
    page.fill('#backfill-form input[name="to"]', end.strftime("%Y-%m-%dT%H:%M:%S"))
    page.get_by_role("button", name="Backfill").click()
    expect(page.locator("#flash")).to_contain_text("backfill done")
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = 'hourly'"
                     " AND scheduled_for BETWEEN %s AND %s", start, end) == 3


def test_the_dashboard_passes_notes_and_backfill_ranges_to_the_api(db, pg_dsn, schema):
    api.create(db, "a/b", "proj.x", cron="0 * * * *", schema=schema)
    board = dashboard.Dashboard(pg_dsn, schema, TOKEN)
    assert board.perform("pause", "a/b", {"note": "  why  "})["pause_note"] == "why"
    board.perform("resume", "a/b", {})
    assert board.perform("pause", "a/b", {"note": ""})["pause_note"] is None
    end = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0) - timedelta(hours=1)
    done = board.perform("backfill", "a/b", {"from": (end - timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M"),
                                             "to": end.strftime("%Y-%m-%dT%H:%M:%SZ")})
    assert done["from"] == end - timedelta(hours=3) and done["to"] == end and done["created"] == 3
    with pytest.raises(dashboard.ScheduleError) as info:
        board.perform("pause", "a/b", {"note": "x" * (MAX_NOTE_LEN + 1)})
    assert info.value.field == "note"
    with pytest.raises(dashboard.ScheduleError) as info:
        board.perform("backfill", "a/b", {"from": "2030-01-01T00:00"})
    assert info.value.field == "to"
    assert dashboard._done("backfill", {"created": 3, "skipped": 0}) == "backfill done: created 3, skipped 0"
