"""`runledger-beat web` served by a real subprocess and called over plain HTTP: what a read-only dashboard shows,
what it refuses without the token, the session and the CSRF token, and what the API stores.

The same dashboard in a real browser is tests/browser/test_dashboard.py; its attacks are tests/e2e/test_web_security.py.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone

import pytest

from runledger_beat import api, cli
from runledger_beat.ops import web as dashboard
from runledger_beat.spec import MAX_NOTE_LEN

from ..support.dashboard import active, api_post, form, get, jobs
from ..support.webproc import TOKEN, call


def test_allow_actions_flag_is_replaced_by_the_token(pg_dsn, schema, capsys):
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "web", "--allow-actions"]) == 2
    assert "RUNLEDGER_WEB_TOKEN" in capsys.readouterr().err


# ---------------------------------------------------------------------------
# Read-only and refused writes (HTTP)


def test_read_only_dashboard_shows_everything_and_refuses_every_write(web, seeded, db):
    base = web()  # no RUNLEDGER_WEB_TOKEN: read-only
    code, html = get(base + "/")
    assert code == 200 and "nightly/report" in html and "heartbeat" in html
    assert "cron 30 2 * * * (Europe/Paris)" in html and "every 30 s" in html and "every 1 h" in html
    assert "read-only" in html and "Log in" not in html
    code, html = get(base + "/schedules/nightly%2Freport")
    assert code == 200 and "ValueError: boom" in html and "celery@w1" in html and "2.500 s" in html  # duration
    assert "Pause" not in html and "Trigger" not in html and 'id="lag-plot"' in html
    assert get(base + "/schedules/nope")[0] == 404
    code, html = get(base + "/beats")
    assert code == 200 and "node-a" in html and "4242" in html
    code, html = get(base + "/problems")
    assert code == 200 and "bad cron &lt;i&gt;row&lt;/i&gt;" in html and "quarantined" in html
    assert "broker refused &lt;b&gt;it&lt;/b&gt;" in html

    code, text = get(base + "/api/schedules")
    rows = json.loads(text)
    assert code == 200 and [r["name"] for r in rows] == ["broken", "heartbeat", "nightly/report"]
    code, text = get(base + "/api/schedules/nightly/report")
    one = json.loads(text)
    assert code == 200 and one["schedule"]["timezone"] == "Europe/Paris" and len(one["next_fires"]) == 10
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", one["next_fires"][0])
    assert one["history"][0]["status"] == "failure"
    assert get(base + "/api/schedules/nope")[0] == 404

    jobs_before = jobs(db, "heartbeat")
    for action in ("pause", "resume", "trigger"):
        assert api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=None)[0] == 403
        assert api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token="anything")[0] == 403
        assert form(f"{base}/schedules/heartbeat/{action}", {"csrf": "x"})[0] == 403
    assert form(base + "/login", {"token": "anything", "csrf": "x"})[0] == 403
    # --read-only ignores a configured token
    forced = web(token=TOKEN, args=("--read-only",))
    assert api_post(f"{forced}/api/schedules/heartbeat/pause", {}, token=TOKEN)[0] == 403
    assert "read-only" in get(forced + "/")[1]
    assert active(db, "heartbeat") is True and jobs(db, "heartbeat") == jobs_before


def test_writes_without_the_token_or_the_session_and_csrf_are_refused(web, seeded, db):
    base = web(token=TOKEN)
    jobs_before = jobs(db, "heartbeat")
    # the JSON API: no header, a wrong token, another scheme
    for action in ("pause", "resume", "trigger"):
        assert api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=None)[0] == 403
        assert api_post(f"{base}/api/schedules/heartbeat/{action}", {}, token=TOKEN + "x")[0] == 403
        assert call(f"{base}/api/schedules/heartbeat/{action}", "POST", b"",
                     {"Authorization": f"Basic {TOKEN}"})[0] == 403
    # the forms: no session at all, then a session (from /login) without login, then a wrong CSRF token
    assert form(f"{base}/schedules/heartbeat/pause", {})[0] == 403
    assert form(f"{base}/schedules/heartbeat/trigger", {"csrf": "guess"})[0] == 403
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    code, html = call(base + "/login", opener=browser)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    assert code == 200 and any(c.name == "runledger_session" for c in jar)
    assert form(f"{base}/schedules/heartbeat/pause", {"csrf": csrf}, browser)[0] == 403  # not logged in
    assert form(base + "/login", {"token": TOKEN, "csrf": "wrong"}, browser)[0] == 403  # login CSRF
    form(base + "/login", {"token": "wrong-token", "csrf": csrf}, browser)
    assert form(f"{base}/schedules/heartbeat/pause", {"csrf": csrf}, browser)[0] == 403  # wrong token: no login
    assert active(db, "heartbeat") is True and jobs(db, "heartbeat") == jobs_before
    # logged in, but a form without the CSRF token is still refused
    code, html = call(base + "/login", opener=browser)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    assert form(base + "/login", {"token": TOKEN, "csrf": csrf}, browser)[0] == 200
    assert form(f"{base}/schedules/heartbeat/pause", {}, browser)[0] == 403
    assert active(db, "heartbeat") is True and jobs(db, "heartbeat") == jobs_before

    # with the token, the API writes
    code, row = api_post(f"{base}/api/schedules/heartbeat/pause", None, token=TOKEN)
    assert code == 200 and row["active"] is False and active(db, "heartbeat") is False
    code, row = api_post(f"{base}/api/schedules/heartbeat/resume", {}, token=TOKEN)
    assert code == 200 and row["active"] is True and re.search(r"Z$", row["next_fire_at"])
    code, job = api_post(f"{base}/api/schedules/nightly%2Freport/trigger", {}, token=TOKEN)
    assert code == 200 and job["stage"] == "manual" and job["schedule_name"] == "nightly/report"
    assert api_post(f"{base}/api/schedules/nope/pause", {}, token=TOKEN)[0] == 404
    assert call(f"{base}/api/schedules/heartbeat/pause", "POST", b"[1]",
                 {"Authorization": f"Bearer {TOKEN}"})[0] == 400


def test_api_pause_note_is_stored(web, seeded, db, schema):
    base = web(token=TOKEN)
    code, row = api_post(f"{base}/api/schedules/heartbeat/pause", {"note": "deploy <b>freeze</b>"}, token=TOKEN)
    assert code == 200 and row["active"] is False
    assert db.execute("SELECT pause_note FROM job_schedules WHERE name = 'heartbeat'").fetchone()["pause_note"] \
        == "deploy <b>freeze</b>"
    code, html = get(base + "/schedules/heartbeat")
    assert "deploy &lt;b&gt;freeze&lt;/b&gt;" in html


# ---------------------------------------------------------------------------
# In the browser


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
