"""The dashboard in a real browser (Playwright driving Debian's chromium against a real `runledger-beat web`):
the schedules page shows a CLI change after a reload, a schedule named like a script renders as text, a login
then a trigger from the page creates a manual ledger row, a pause from the page reaches a running beat within a
second, a backfill from the page records the missed slots.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
import urllib.parse
from datetime import datetime, timedelta, timezone

from runledger_beat import api, cli
from runledger_beat.db import connect

from ..support.dashboard import SCRIPT_NAME, active, clock, jobs, schedule_page
from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.services import wait_for
from ..support.webproc import TOKEN


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
    _login(page, base, schedule_page(SCRIPT_NAME))
    expect(page.locator("#name")).to_have_text(SCRIPT_NAME)
    page.get_by_role("button", name="Trigger now").click()  # a POST to the escaped name's URL
    expect(page.locator("#flash")).to_contain_text("triggered")
    for path in ("/", schedule_page(SCRIPT_NAME), "/problems"):
        page.goto(base + path)
        assert page.evaluate("document.querySelectorAll('script, img, svg[onload]').length") == 0
    assert page.dialogs == []
    assert jobs(db, SCRIPT_NAME) == 2


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
    assert active(db, "nightly/report") is False
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#state")).to_have_text("active")
    assert active(db, "nightly/report") is True
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
        clicked = clock(db)
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
        assert active(db, "tick") is False and beat.alive()
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
