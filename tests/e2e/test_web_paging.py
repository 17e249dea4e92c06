"""The dashboard and ``GET /api/schedules`` a page at a time, over HTTP from a real `runledger-beat web`: the Link
header walks every schedule exactly once, limits are capped, search works, the schedules page shows 100 with a
link to the next page, and /problems shows a bounded number of faulted schedules."""

from __future__ import annotations

import json
import re

from runledger_beat import api

from ..support.webproc import raw


def _schedules(db, count: int, prefix: str = "s-", task: str = "proj.daily") -> None:
    db.execute("INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, next_fire_at)"
               " SELECT gen_random_uuid(), %s || lpad(i::text, 4, '0'), %s, '{\"args\": [], \"kwargs\": {}}',"
               " 'cron', '0 3 * * *', now() + interval '1 hour' FROM generate_series(1, %s) AS i",
               (prefix, task, count))


def _get(base: str, path: str) -> tuple[int, dict, bytes]:
    host = base.removeprefix("http://")
    return raw(base, "GET", path, headers={"Host": host})


def _next(headers: dict) -> str | None:
    match = re.fullmatch(r'<([^>]+)>; rel="next"', headers.get("link", ""))
    return match.group(1) if match else None


def test_api_pages_follow_the_link_header_through_every_schedule_once(web, db):
    _schedules(db, 230)
    api.create(db, "zz/needle-in-a-haystack", "proj.find", every=60)
    base = web()
    expected = [r["name"] for r in db.execute("SELECT name FROM job_schedules ORDER BY name").fetchall()]

    code, headers, body = _get(base, "/api/schedules")
    rows = json.loads(body)
    assert code == 200 and [r["name"] for r in rows] == expected[:100]
    assert rows[0]["task"] == "proj.daily" and rows[0]["cron"] == "0 3 * * *"  # the same shape as before
    names, path, pages = [], "/api/schedules?limit=40", 0
    while path:
        code, headers, body = _get(base, path)
        assert code == 200
        names += [r["name"] for r in json.loads(body)]
        path, pages = _next(headers), pages + 1
        assert path is None or path.startswith("/api/schedules?") and "limit=40" in path
    assert names == expected and pages == 6  # 231 schedules, 40 a page

    code, headers, body = _get(base, "/api/schedules?limit=1000")
    assert code == 200 and len(json.loads(body)) == 231 and "link" not in headers
    for bad in ("0", "1001", "-1", "x", "99999999999"):
        code, _, body = _get(base, f"/api/schedules?limit={bad}")
        assert code == 400 and json.loads(body)["field"] == "limit"
    code, _, body = _get(base, "/api/schedules?q=" + "x" * 201)
    assert code == 400 and json.loads(body)["field"] == "q"

    code, headers, body = _get(base, "/api/schedules?q=HAYSTACK")
    assert code == 200 and [r["name"] for r in json.loads(body)] == ["zz/needle-in-a-haystack"]
    code, headers, body = _get(base, "/api/schedules?q=s-01&limit=5")
    assert [r["name"] for r in json.loads(body)] == [f"s-01{i:02d}" for i in range(5)]
    follow = _next(headers)
    assert follow and "q=s-01" in follow and "after=s-0104" in follow
    code, headers, body = _get(base, follow)
    assert [r["name"] for r in json.loads(body)] == [f"s-01{i:02d}" for i in range(5, 10)]
    code, headers, body = _get(base, "/api/schedules?task=proj.find")
    assert [r["name"] for r in json.loads(body)] == ["zz/needle-in-a-haystack"] and "link" not in headers


def test_schedules_page_shows_a_hundred_with_search_and_a_next_page(web, db):
    _schedules(db, 150)
    api.create(db, "zz-needle", "proj.find", cron="0 4 * * *")
    base = web()
    code, _, body = _get(base, "/")
    html = body.decode()
    assert code == 200 and html.count("<tr data-name=") == 100
    assert 'id="schedule-count">151<' in html and 'id="search"' in html
    nxt = re.search(r'id="next-page" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "after=s-0100" in nxt and 'id="first-page"' not in html
    code, _, body = _get(base, nxt)
    html = body.decode()
    assert html.count("<tr data-name=") == 51 and 'id="next-page"' not in html and 'id="first-page"' in html
    assert re.search(r'<tr data-name="zz-needle">.*?class="t next">\d{4}-\d\d-\d\dT04:00:00Z<br>', html, re.S)
    code, _, body = _get(base, "/?q=NEED")
    html = body.decode()
    assert re.findall(r'<tr data-name="([^"]+)"', html) == ["zz-needle"] and 'value="NEED"' in html
    code, _, body = _get(base, "/?q=nothing-matches")
    assert 'id="no-match"' in body.decode()
    code, _, body = _get(base, "/?limit=5000")
    assert code == 400 and "limit" in body.decode()


def test_problems_page_shows_at_most_a_hundred_faulted_schedules(web, db):
    _schedules(db, 105, prefix="bad-")
    db.execute("INSERT INTO schedule_faults (schedule_id, failures, last_error, retry_at)"
               " SELECT id, 1, 'boom', now() + interval '1 hour' FROM job_schedules")
    base = web()
    code, _, body = _get(base, "/problems")
    html = body.decode()
    faulted = html.split('id="faulted"', 1)[1].split("</table>", 1)[0]
    assert code == 200 and faulted.count("<tr data-name=") == 100 and 'id="more-faulted"' in html
