"""Attacks on a real `runledger-beat web` process over HTTP: each fails for the attacker and changes no row.

- foreign Host (a DNS-rebinding page reading the bound port as evil.example) gets 400 before any database work:
  test_a_foreign_host_gets_400_and_no_data, test_the_host_check_comes_before_any_database_work
- a session cookie copied before logout (or before a token change) is refused afterwards:
  test_a_cookie_replayed_after_logout_is_refused, test_a_new_token_or_a_restart_ends_every_session
- login and bearer brute force: the 6th failure in a minute answers 429 with Retry-After, per client address:
  test_login_brute_force_gets_429_on_the_sixth_try, test_bearer_brute_force_gets_429_on_the_sixth_try
- a short token is refused at start: test_a_short_token_is_refused_at_start
- --https: the cookie is Secure and HSTS is sent: test_https_sets_a_secure_cookie_and_hsts
- --private: reads need the session or the bearer token: test_private_dashboard_needs_a_login_to_read
- hostile bodies and paths (NUL, lone surrogate, bidi, invalid UTF-8, JSON 8,000 deep, oversized, too many fields,
  a bad limit) get a 4xx, never a 500: test_hostile_api_input_gets_a_4xx_and_changes_nothing,
  test_hostile_form_input_gets_a_4xx_or_a_refusal_and_changes_nothing
- an uncaught error answers a plain 500 and logs one redacted line:
  test_an_uncaught_error_answers_a_plain_500_and_logs_no_password
- a row nested 900 deep by raw SQL still renders: test_a_row_nested_900_deep_by_raw_sql_still_renders
- the guards' parts (Host parsing, per-/64 counting, bounded memory): test_host_names_client_keys_and_bounded_memory
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.parse

import psycopg
import pytest

from runledger_beat import api
from runledger_beat.errors import ConfigError
from runledger_beat.ops import web as dashboard
from runledger_beat.spec import MAX_NOTE_LEN

from ..support.netcut import Proxy
from ..support.procs import ROOT, celery_env
from ..support.rows import snapshot
from ..support.services import wait_for
from ..support.webproc import TOKEN, raw

SECRET_KWARG = "kwarg-secret-7f3a"


@pytest.fixture
def seeded(db, schema):
    api.create(db, "heartbeat", "proj.ping", every="30s", kwargs={"api_key": SECRET_KWARG}, schema=schema)
    api.create(db, "nightly/report", "proj.report", cron="30 2 * * *", schema=schema)
    api.pause(db, "nightly/report", note="kept", schema=schema)
    return snapshot(db)


def _host(base: str) -> str:
    return base.removeprefix("http://")


def _cookie(headers: dict[str, str]) -> str:
    """The name=value of the session cookie a response sets."""
    return headers["set-cookie"].split(";", 1)[0]


def _login_form(base: str, source: str | None = None) -> tuple[str, str]:
    """(cookie, csrf) of a fresh /login page."""
    code, headers, body = raw(base, "GET", "/login", headers={"Host": _host(base)}, source=source)
    assert code == 200
    return _cookie(headers), re.search(r'name="csrf" value="([^"]+)"', body.decode()).group(1)


def _post_form(base: str, path: str, fields: dict, cookie: str | None = None, source: str | None = None,
               host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    headers = {"Host": _host(base) if host is None else host, "Content-Type": "application/x-www-form-urlencoded"}
    if cookie:
        headers["Cookie"] = cookie
    return raw(base, "POST", path, urllib.parse.urlencode(fields).encode(), headers, source)


def _login(base: str, token: str = TOKEN) -> tuple[str, str]:
    """Log in; returns (cookie, csrf) of the logged-in session."""
    cookie, csrf = _login_form(base)
    code, headers, _ = _post_form(base, "/login", {"token": token, "csrf": csrf, "next": "/"}, cookie)
    assert code == 303 and headers["location"] == "/", (code, headers)
    cookie = _cookie(headers)
    code, _, body = raw(base, "GET", "/schedules/heartbeat", headers={"Host": _host(base), "Cookie": cookie})
    assert code == 200 and "Log out" in body.decode()
    return cookie, re.search(r'name="csrf" value="([^"]+)"', body.decode()).group(1)


def _bearer(base: str, path: str, token: str, body: bytes = b"{}", source: str | None = None,
            host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    return raw(base, "POST", path, body, {"Host": _host(base) if host is None else host,
                                          "Content-Type": "application/json", "Authorization": f"Bearer {token}"},
               source)


# ---------------------------------------------------------------------------
# Host header


def test_a_foreign_host_gets_400_and_no_data(web, seeded, db):
    base = web(token=TOKEN)
    port = base.rsplit(":", 1)[1]
    # What a DNS-rebinding page sends: the victim's browser connects to the bound port, Host names the attacker.
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}", "localhost.evil.example",
                 f"127.0.0.2:{port}", "", "evil.example:80@127.0.0.1"):
        for path in ("/", "/api/schedules", "/api/schedules/heartbeat", "/schedules/heartbeat", "/problems",
                     "/login", "/healthz"):
            code, headers, body = raw(base, "GET", path, headers={"Host": host})
            assert code == 400, (host, path, code)
            assert SECRET_KWARG.encode() not in body and b"heartbeat" not in body
            if path.startswith("/api/"):
                assert json.loads(body)["error"].startswith("Host")
        code, _, body = _bearer(base, "/api/schedules/heartbeat/pause", TOKEN, host=host)
        assert code == 400 and b"heartbeat" not in body
    # a request without any Host header (HTTP/1.0 style) is refused too
    assert raw(base, "GET", "/api/schedules", headers={"Host": ""})[0] == 400
    assert snapshot(db) == seeded
    # the bound host and loopback names are allowed, in any case and with any port
    for host in (_host(base), f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}", "127.0.0.1"):
        code, _, body = raw(base, "GET", "/api/schedules", headers={"Host": host})
        assert code == 200 and SECRET_KWARG in body.decode(), host
    # --allow-host adds names (repeatable); then only those and the defaults pass
    named = web(token=TOKEN, args=("--allow-host", "dash.example.com", "--allow-host", "ops.example.com"))
    for host in ("dash.example.com", "OPS.example.com:8443", _host(named)):
        assert raw(named, "GET", "/api/schedules", headers={"Host": host})[0] == 200, host
    assert raw(named, "GET", "/api/schedules", headers={"Host": "evil.example"})[0] == 400
    assert snapshot(db) == seeded


def test_the_host_check_comes_before_any_database_work(web, seeded, pg_dsn):
    """The dashboard reaches Postgres through a proxy that counts connections: a foreign Host opens none."""
    target = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    proxy = Proxy((target.get("host") or "127.0.0.1", int(target.get("port") or 5432)))
    try:
        base = web(token=TOKEN, dsn=psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=proxy.port))
        opened = len(proxy.pairs)
        for path in ("/", "/api/schedules", "/api/schedules/heartbeat", "/schedules/heartbeat"):
            assert raw(base, "GET", path, headers={"Host": "evil.example"})[0] == 400
        assert _bearer(base, "/api/schedules/heartbeat/trigger", TOKEN, host="evil.example")[0] == 400
        assert len(proxy.pairs) == opened
        assert raw(base, "GET", "/api/schedules", headers={"Host": _host(base)})[0] == 200
        assert len(proxy.pairs) > opened  # the count does see the dashboard's connections
    finally:
        proxy.close()


# ---------------------------------------------------------------------------
# Sessions


def test_a_cookie_replayed_after_logout_is_refused(web, seeded, db):
    base = web(token=TOKEN, args=("--private",))
    cookie, csrf = _login(base)
    stolen = cookie  # what an attacker copied from the victim's browser
    code, headers, _ = _post_form(base, "/logout", {"csrf": csrf}, cookie)
    assert code == 303
    # the copied cookie is dead: no write, and (with --private) no read either
    for action in ("pause", "trigger"):
        code, headers, body = _post_form(base, f"/schedules/heartbeat/{action}", {"csrf": csrf}, stolen)
        assert code == 403, (action, code, body[:300])
    code, headers, body = raw(base, "GET", "/schedules/heartbeat", headers={"Host": _host(base), "Cookie": stolen})
    assert code == 303 and headers["location"].startswith("/login") and SECRET_KWARG.encode() not in body
    code, _, body = raw(base, "GET", "/api/schedules", headers={"Host": _host(base), "Cookie": stolen})
    assert code == 401 and SECRET_KWARG.encode() not in body
    assert snapshot(db) == seeded


def test_a_new_token_or_a_restart_ends_every_session(web, seeded, db):
    base = web(token=TOKEN)
    cookie, csrf = _login(base)
    assert _post_form(base, "/schedules/heartbeat/trigger", {"csrf": csrf}, cookie)[0] == 303  # the session works
    after_trigger = snapshot(db)
    web.procs[0].stop()
    for token in (TOKEN, TOKEN + "-rotated"):  # the same token restarted, then a new one
        again = web(token=token)
        port = again.rsplit(":", 1)[1]
        stolen = cookie  # cookies are per host, not per port: the browser would send it to the new process
        code, _, _ = _post_form(again, "/schedules/heartbeat/pause", {"csrf": csrf}, stolen, host=f"127.0.0.1:{port}")
        assert code == 403
    assert snapshot(db) == after_trigger


# ---------------------------------------------------------------------------
# Brute force


def test_login_brute_force_gets_429_on_the_sixth_try(web, seeded, db):
    base = web(token=TOKEN)
    cookie, csrf = _login_form(base)
    for guess in range(5):
        code, headers, _ = _post_form(base, "/login", {"token": f"guess-{guess:016d}", "csrf": csrf}, cookie)
        assert code == 303 and headers["location"].startswith("/login"), code
    code, headers, body = _post_form(base, "/login", {"token": "guess-6", "csrf": csrf}, cookie)
    assert code == 429 and 1 <= int(headers["retry-after"]) <= 60 and b"Too many" in body
    # blocked means blocked: even the right token does not log this address in now
    code, headers, _ = _post_form(base, "/login", {"token": TOKEN, "csrf": csrf}, cookie)
    assert code == 429 and "set-cookie" not in headers
    code, _, body = raw(base, "GET", "/", headers={"Host": _host(base), "Cookie": cookie})
    assert code == 200 and "Log out" not in body.decode()
    # the limit is per client address: another one logs in
    other_cookie, other_csrf = _login_form(base, source="127.0.0.2")
    code, headers, _ = _post_form(base, "/login", {"token": TOKEN, "csrf": other_csrf}, other_cookie,
                                  source="127.0.0.2")
    assert code == 303 and headers["location"] == "/"
    assert snapshot(db) == seeded


def test_bearer_brute_force_gets_429_on_the_sixth_try(web, seeded, db):
    base = web(token=TOKEN)
    for guess in range(5):
        assert _bearer(base, "/api/schedules/heartbeat/pause", f"guess-{guess:016d}")[0] == 403
    code, headers, body = _bearer(base, "/api/schedules/heartbeat/pause", "guess-6")
    assert code == 429 and 1 <= int(headers["retry-after"]) <= 60 and "error" in json.loads(body)
    assert _bearer(base, "/api/schedules/heartbeat/pause", TOKEN)[0] == 429  # blocked, even with the token
    assert snapshot(db) == seeded
    code, _, body = _bearer(base, "/api/schedules/heartbeat/pause", TOKEN, source="127.0.0.2")
    assert code == 200 and json.loads(body)["active"] is False  # another address is not blocked


# ---------------------------------------------------------------------------
# Start-up options


def test_a_short_token_is_refused_at_start(pg_dsn, schema):
    env = celery_env(pg_dsn, schema, "memory://", "unused")
    for token in ("abcde", "0123456789abcde", "   abcde    "):
        env[dashboard.TOKEN_ENV] = token
        done = subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--schema", schema, "web", "--port", "1"],
                              env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "RUNLEDGER_WEB_TOKEN" in done.stderr
        assert token.strip() not in done.stderr and "Traceback" not in done.stderr
    with pytest.raises(ConfigError, match="RUNLEDGER_WEB_TOKEN"):
        dashboard.create_app(pg_dsn, schema, "abcde")


def test_https_sets_a_secure_cookie_and_hsts(web):
    plain = web(token=TOKEN)
    _, headers, _ = raw(plain, "GET", "/login", headers={"Host": _host(plain)})
    assert "secure" not in headers["set-cookie"].lower() and "strict-transport-security" not in headers
    secure = web(token=TOKEN, args=("--https",))
    _, headers, _ = raw(secure, "GET", "/login", headers={"Host": _host(secure)})
    attributes = [part.strip().lower() for part in headers["set-cookie"].split(";")]
    assert "secure" in attributes and "httponly" in attributes and "samesite=strict" in attributes
    assert headers["set-cookie"].startswith("__Host-")
    assert re.fullmatch(r"max-age=\d{7,}", headers["strict-transport-security"])


def test_private_dashboard_needs_a_login_to_read(web, seeded, db, pg_dsn, schema):
    base = web(token=TOKEN, args=("--private",))
    host = {"Host": _host(base)}
    for path in ("/", "/schedules/heartbeat", "/beats", "/problems"):
        code, headers, body = raw(base, "GET", path, headers=host)
        assert code == 303 and headers["location"].startswith("/login?next="), path
        assert SECRET_KWARG.encode() not in body and b"heartbeat" not in body
    for path in ("/api/schedules", "/api/schedules/heartbeat"):
        code, headers, body = raw(base, "GET", path, headers=host)
        assert code == 401 and headers["www-authenticate"].startswith("Bearer") and b"heartbeat" not in body
        code, _, body = raw(base, "GET", path, headers=dict(host, Authorization="Bearer not-the-token-at-all"))
        assert code == 401 and b"heartbeat" not in body
        code, _, body = raw(base, "GET", path, headers=dict(host, Authorization=f"Bearer {TOKEN}"))
        assert code == 200 and SECRET_KWARG in body.decode()
    assert raw(base, "GET", "/healthz", headers=host)[:1] == (200,)
    assert raw(base, "GET", "/login", headers=host)[0] == 200
    cookie, _ = _login(base)
    code, _, body = raw(base, "GET", "/", headers=dict(host, Cookie=cookie))
    assert code == 200 and "heartbeat" in body.decode()
    code, _, body = raw(base, "GET", "/api/schedules", headers=dict(host, Cookie=cookie))
    assert code == 200 and SECRET_KWARG in body.decode()
    assert snapshot(db) == seeded
    # --private needs the token to log in with
    env = celery_env(pg_dsn, schema, "memory://", "unused")
    env.pop(dashboard.TOKEN_ENV, None)
    done = subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--schema", schema, "web", "--private"],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "RUNLEDGER_WEB_TOKEN" in done.stderr


# ---------------------------------------------------------------------------
# Hostile input


def test_hostile_api_input_gets_a_4xx_and_changes_nothing(web, seeded, db):
    base = web(token=TOKEN)
    host = {"Host": _host(base)}
    pause = "/api/schedules/heartbeat/pause"
    cases = [
        ("GET", "/api/schedules/heart%00beat", None, 400),
        ("GET", "/api/schedules/heartbeat?limit=abc", None, 400),
        ("GET", "/api/schedules/heartbeat?limit=0", None, 400),
        ("GET", "/api/schedules/heartbeat?limit=99999999999999999999", None, 400),
        ("GET", "/api/nothing-here", None, 404),
        ("DELETE", "/api/schedules", None, 405),
        ("POST", pause, b'{"note": "stop\\u0000here"}', 400),
        ("POST", pause, b'{"note": "lone \\ud800 surrogate"}', 400),
        ("POST", pause, '{"note": "txt.exe\u202egnp"}'.encode(), 400),
        ("POST", pause, b'{"note": "\xff\xfe invalid UTF-8"}', 400),
        ("POST", pause, b"[" * 8000 + b"]" * 8000, 400),
        ("POST", pause, b'{"note": ' + b"[" * 8000 + b"]" * 8000 + b"}", 400),
        ("POST", pause, b'{"note": ' + b"9" * 5000 + b"}", 400),
        ("POST", pause, b'{"note": "' + b"x" * 40000 + b'"}', 413),
        ("POST", "/api/schedules/heart%00beat/pause", b"{}", 400),
        ("POST", "/api/schedules/heartbeat/backfill", b'{"from": "2020-01-01\\u0000", "to": "2020-01-02"}', 400),
    ]
    for method, path, body, status in cases:
        headers = dict(host, Authorization=f"Bearer {TOKEN}", **({"Content-Type": "application/json"} if body else {}))
        code, answer_headers, answer = raw(base, method, path, body, headers)
        assert code == status, (method, path, (body or b"")[:40], code, answer[:300])
        assert answer_headers["content-type"].startswith("application/json"), (path, answer_headers)
        assert "error" in json.loads(answer)
    code, _, answer = raw(base, "GET", "/api/schedules/heartbeat?limit=1", headers=host)
    assert code == 200 and len(json.loads(answer)["history"]) <= 1
    assert snapshot(db) == seeded
    assert "Traceback" not in web.procs[0].log()


def test_hostile_form_input_gets_a_4xx_or_a_refusal_and_changes_nothing(web, seeded, db):
    base = web(token=TOKEN)
    host = {"Host": _host(base)}
    for path, status in (("/schedules/heart%00beat", 400), ("/schedules/%ff%fe", 404), ("/nothing-here", 404)):
        code, headers, body = raw(base, "GET", path, headers=host)
        assert code == status and headers["content-type"].startswith("text/html"), (path, code)
    cookie, csrf = _login(base)
    form = dict(host, Cookie=cookie, **{"Content-Type": "application/x-www-form-urlencoded"})
    bodies = [
        (b"csrf=" + csrf.encode() + b"&note=%ff%fe", 400),  # not UTF-8
        (b"&".join(b"f%d=1" % i for i in range(50)) + b"&csrf=" + csrf.encode(), 400),  # too many fields
        (b"csrf=" + csrf.encode() + b"&note=" + b"x" * 40000, 413),
    ]
    for body, status in bodies:
        code, headers, answer = raw(base, "POST", "/schedules/heartbeat/pause", body, form)
        assert code == status and headers["content-type"].startswith("text/html"), (body[:40], code, answer[:200])
    assert raw(base, "POST", "/schedules/heart%00beat/pause", b"csrf=" + csrf.encode(), form)[0] == 400
    # field errors come back as the refusal on the schedule's page
    for note in ("stop\x00here", "txt.exe\u202egnp", "zero\u200bwidth", "x" * (MAX_NOTE_LEN + 1)):
        code, headers, _ = raw(base, "POST", "/schedules/heartbeat/pause",
                               urllib.parse.urlencode({"csrf": csrf, "note": note}).encode(), form)
        assert code == 303  # the refusal travels in the session cookie to the schedule's page
        code, _, page = raw(base, "GET", headers["location"], headers=dict(host, Cookie=_cookie(headers)))
        assert "pause refused: note:" in page.decode(), note[:20]
    assert snapshot(db) == seeded
    # the longest note the API takes, in 4-byte characters, fits in a form
    code, headers, _ = raw(base, "POST", "/schedules/heartbeat/pause",
                           urllib.parse.urlencode({"csrf": csrf, "note": "\U0001F600" * MAX_NOTE_LEN}).encode(), form)
    assert code == 303 and db.execute("SELECT pause_note FROM job_schedules WHERE name = 'heartbeat'"
                                      ).fetchone()["pause_note"] == "\U0001F600" * MAX_NOTE_LEN
    assert "Traceback" not in web.procs[0].log()


def test_a_row_nested_900_deep_by_raw_sql_still_renders(web, seeded, db):
    db.execute("UPDATE job_schedules SET payload_template"
               " = jsonb_build_object('args', %s::jsonb, 'kwargs', '{}'::jsonb) WHERE name = 'heartbeat'",
               ("[" * 900 + "]" * 900,))
    base = web()
    for path in ("/schedules/heartbeat", "/api/schedules/heartbeat", "/api/schedules", "/"):
        code, _, body = raw(base, "GET", path, headers={"Host": _host(base)})
        assert code == 200 and b"heartbeat" in body, (path, code, body[:200])
    assert b"nested deeper than 64 levels" in raw(base, "GET", "/api/schedules", headers={"Host": _host(base)})[2]


def test_an_uncaught_error_answers_a_plain_500_and_logs_no_password(web, seeded, pg_dsn):
    """The database goes away under a running dashboard whose DSN holds a password: a plain 500, a redacted log."""
    marker = "pw-marker-5be1c0"
    target = psycopg.conninfo.conninfo_to_dict(pg_dsn)
    proxy = Proxy((target.get("host") or "127.0.0.1", int(target.get("port") or 5432)))
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, host="127.0.0.1", port=proxy.port, password=marker)
    try:
        base = web(token=TOKEN, dsn=dsn)
        assert raw(base, "GET", "/api/schedules", headers={"Host": _host(base)})[0] == 200
    finally:
        proxy.close()
    for path in ("/", "/api/schedules", "/schedules/heartbeat"):
        code, headers, body = raw(base, "GET", path, headers={"Host": _host(base)})
        assert code == 500 and marker.encode() not in body and b"127.0.0.1" not in body, (path, code, body[:300])
        assert b"Traceback" not in body and b"psycopg" not in body
    wait_for(lambda: "runledger_beat.ops.web" in web.procs[0].log(), message="the error to be logged")
    log = web.procs[0].log()
    assert marker not in log and "Traceback" not in log and "connection" in log.lower(), log


# ---------------------------------------------------------------------------
# The guards' parts (no server)


def test_host_names_client_keys_and_bounded_memory():
    from runledger_beat.ops.websecurity import FailureLimiter, Sessions, client_key, host_name, served_hosts

    assert host_name("LocalHost:8080") == "localhost" and host_name("[::1]:8080") == "::1"
    assert host_name("[::1]") == "::1" and host_name("::1") == "::1" and host_name("dash.example") == "dash.example"
    for forged in ("[::1]x", "[::1]:80x", "evil.example:80@127.0.0.1", ":8080", "[::1"):
        assert host_name(forged) in ("", forged.lower()) and host_name(forged) not in served_hosts(["127.0.0.1"])
    assert served_hosts(["0.0.0.0", "Dash.Example"]) == {"localhost", "127.0.0.1", "::1", "dash.example"}
    assert served_hosts(["::"]) == {"localhost", "127.0.0.1", "::1"}
    # one IPv6 host holds a whole /64: its addresses share one count
    assert client_key("2001:db8::1") == client_key("2001:db8::ffff") == "2001:db8::/64"
    assert client_key("::ffff:10.0.0.1") == "10.0.0.1" and client_key(None) == "unknown"

    limiter = FailureLimiter(limit=2, window=0.5, clients=3)
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 0
    limiter.failed("10.0.0.1")
    assert limiter.retry_after("10.0.0.1") == 1 and limiter.retry_after("10.0.0.2") == 0
    wait_for(lambda: limiter.retry_after("10.0.0.1") == 0, timeout=5, message="the window to pass")
    for n in range(10):  # many addresses: only the three latest are remembered
        limiter.failed(f"10.0.1.{n}")
        limiter.failed(f"10.0.1.{n}")
    assert len(limiter._failures) == 3 and limiter.retry_after("10.0.1.9") == 1
    assert limiter.retry_after("10.0.1.0") == 0

    sessions = Sessions(max_age=60, limit=2)
    first, second, third = sessions.start(), sessions.start(), sessions.start()
    assert not sessions.alive(first) and sessions.alive(second) and sessions.alive(third)  # the oldest ended
    sessions.end(third)
    assert not sessions.alive(third) and not sessions.alive(True) and not sessions.alive(None)
