"""The dashboard's tests share these: plain HTTP helpers, the seeded schedules and ledger rows, a browser."""

from __future__ import annotations

import json
import shutil
import urllib.parse

import pytest

from runledger_beat import api

from .e2e import count
from .services import REQUIRE
from .webproc import call

SCRIPT_NAME = "<script>alert(1)</script>"


def get(url: str) -> tuple[int, str]:
    return call(url)


def form(url: str, fields: dict, opener=None) -> tuple[int, str]:
    return call(url, "POST", urllib.parse.urlencode(fields).encode(),
                 {"Content-Type": "application/x-www-form-urlencoded"}, opener)


def api_post(url: str, body: dict | None = None, token: str | None = None) -> tuple[int, dict]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    code, text = call(url, "POST", json.dumps(body).encode() if body is not None else None, headers)
    return code, (json.loads(text) if text.startswith(("{", "[")) else {})


def schedule_page(name: str) -> str:
    return "/schedules/" + urllib.parse.quote(name, safe="")


def active(db, name: str) -> bool:
    return db.execute("SELECT is_active FROM job_schedules WHERE name = %s", (name,)).fetchone()["is_active"]


def jobs(db, name: str) -> int:
    return count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_name = %s", name)


def clock(db):
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
