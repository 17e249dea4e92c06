"""`runledger-beat web`: the dashboard (Starlette + Jinja2, served by uvicorn).

Pages: ``/`` the schedules, 100 a page by name with a search box (timing in
words, zone, state, next three fires, last status and the lag of the last fire;
see listing.py), ``/schedules/{name}`` one schedule
(next ten fires, history with duration and worker, an inline SVG plot of the lag
of its last 100 fires), ``/beats`` the running beats, ``/problems`` quarantined
or failing schedules and ledger rows that failed, were lost or expired. JSON:
``GET /api/schedules[?limit=N&after=NAME&q=TEXT&task=T]`` (a page, ``Link: rel="next"``
while more remain) and ``GET /api/schedules/{name}[?limit=N]``, datetimes RFC 3339.

Writes (pause with a note, resume, trigger, backfill) are gated by one shared
token, env ``RUNLEDGER_WEB_TOKEN`` (at least 16 characters): the JSON API wants
``Authorization: Bearer <token>``; the HTML forms want a session from ``/login``
(the token, compared in constant time) and the session's CSRF token in every
form. The session is a signed cookie (Starlette SessionMiddleware, key derived
from the token, httponly, samesite=strict, Secure with ``https``) holding a
random id that is logged in only while this process keeps it
(``websecurity.Sessions``): logout ends it, also for a copy of the cookie.
Without a token the dashboard is read-only: no buttons, and every write answers
403 and changes nothing. ``private`` makes reading need the login or the bearer
token too (``/healthz`` stays open).

Every request first passes ``websecurity.Guard``: a Host header not allowed
(DNS rebinding) gets 400 before any other work, and an uncaught error is logged
redacted and answers a plain 500. Wrong tokens are counted per client address:
the sixth within a minute answers 429. Bad input answers a 4xx: JSON for
``/api/*``, an HTML page otherwise; form fields a schedule refuses come back as
the refusal on the schedule's page. Every read and write goes through
runledger_beat.api and the stores, one short connection per request.
A request that meets a schema without the runledger tables (dropped, or older
than this code) answers 503 with the line ``runledger-beat`` prints for it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import Iterable
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

import psycopg

from .. import api
from ..db.connect import DEFAULT_SCHEMA, check_dsn, connect
from ..db.migrate import require_schema
from ..db.ops_store import OpsStore
from ..db.redaction import safe_error
from ..errors import ConfigError, ScheduleError
from ..spec import MAX_NOTE_LEN, check_lookup, parse_json
from ..timing.formats import format_rfc3339, parse_instant
from .listing import MAX_PAGE_ROWS, PAGE_ROWS, limit_param, next_fires, next_href, schedule_count, schedule_page
from .output import jsonable
from .pages import duration, lag_plot, schedule_path, seconds_words, timing_words
from .websecurity import TOKEN_ENV, FailureLimiter, Guard, Sessions, check_token, served_hosts

__all__ = ["TOKEN_ENV", "Dashboard", "create_app", "serve", "token_from_env"]

ACTIONS = ("pause", "resume", "trigger", "backfill")
LIST_FIRES = 3
PAGE_FIRES = 10
HISTORY_ROWS = 50
#: Most history rows ``GET /api/schedules/{name}?limit=N`` returns.
MAX_HISTORY_ROWS = 1000
LAG_FIRES = 100
PROBLEM_ROWS = 100
#: Largest request body: a 2000-character note of 4-byte characters, percent-encoded, and the rest of its form.
MAX_BODY = 32 * 1024
MAX_FORM_FIELDS = 20
SESSION_MAX_AGE = 12 * 3600
SESSION_COOKIE = "runledger_session"
#: The cookie's name with --https: the __Host- prefix makes browsers insist on Secure, path / and no Domain.
SECURE_SESSION_COOKIE = "__Host-runledger_session"


def session_secret(token: str) -> str:
    """The session cookie's signing key: derived from the token, so a new token ends every session."""
    return hmac.new(token.encode(), b"runledger_beat.web session v1", hashlib.sha256).hexdigest()


def same_token(given: str | None, token: str) -> bool:
    """Constant-time comparison of a presented token with the configured one."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def parse_form(body: bytes) -> dict[str, str]:
    """An application/x-www-form-urlencoded body as {field: first value}; HTTPException 400 when it is not UTF-8
    or has more than MAX_FORM_FIELDS fields."""
    from starlette.exceptions import HTTPException

    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS,
                          errors="strict")
    except UnicodeDecodeError:
        raise HTTPException(400, "the form is not UTF-8 text") from None
    except ValueError:
        raise HTTPException(400, f"a form has at most {MAX_FORM_FIELDS} fields") from None
    return {k: v[0] for k, v in fields.items()}


def safe_next(target: str | None) -> str:
    """A local path to go back to after login (anything else: '/')."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


def history_limit(text: str | None) -> int:
    """The ``limit`` query parameter: history rows, 1..MAX_HISTORY_ROWS (default HISTORY_ROWS)."""
    return limit_param("limit", text, HISTORY_ROWS, MAX_HISTORY_ROWS)


def _api(request: Any) -> bool:
    """Whether the request is for the JSON API (its errors are JSON too)."""
    return request.url.path.startswith("/api/")


# ---------------------------------------------------------------------------
# The application


class Dashboard:
    """The routes' logic over one database / schema.

    ``token`` None: nobody logs in and nothing changes. ``writable`` False (--read-only): a token only opens the
    reads of a ``private`` dashboard. ``private``: reading needs the login or the bearer token too.
    """

    def __init__(self, dsn: str, schema: str, token: str | None, *, writable: bool = True,
                 private: bool = False) -> None:
        from jinja2 import Environment, FileSystemLoader
        from starlette.templating import Jinja2Templates

        self.dsn, self.schema, self.token = dsn, schema, token or None
        self.writable, self.private = self.token is not None and writable, private
        self.sessions = Sessions(SESSION_MAX_AGE)
        self.failures = FailureLimiter()
        folder = resources.files("runledger_beat.ops").joinpath("templates")
        env = Environment(loader=FileSystemLoader(str(folder)), autoescape=True)
        env.filters.update(when=lambda dt: format_rfc3339(dt) if dt else "-", seconds=seconds_words,
                           timing=timing_words, href=schedule_path, duration=duration,
                           pretty=lambda v: json.dumps(jsonable(v), sort_keys=True))
        self.templates = Jinja2Templates(env=env)

    # -- helpers -------------------------------------------------------------------

    def conn(self) -> Any:
        return connect(self.dsn, self.schema, autocommit=True, application_name="runledger_beat.web")

    def session(self, request: Any) -> dict:
        return request.scope.get("session", {})

    def logged_in(self, request: Any) -> bool:
        """Whether the request's session logged in with the token and has not logged out since."""
        return self.token is not None and self.sessions.alive(self.session(request).get("auth"))

    def csrf(self, request: Any) -> str | None:
        """This session's CSRF token (created on first use); None when nobody can log in."""
        if self.token is None:
            return None
        session = self.session(request)
        if "csrf" not in session:
            session["csrf"] = secrets.token_urlsafe(32)
        return session["csrf"]

    def csrf_ok(self, request: Any, fields: dict[str, str]) -> bool:
        """Whether the form carries this session's CSRF token (constant-time comparison)."""
        expected = self.session(request).get("csrf")
        return bool(expected) and hmac.compare_digest(fields.get("csrf", "").encode(), expected.encode())

    def client(self, request: Any) -> str | None:
        """The client's address, whose failed attempts are counted (the TCP peer: no forwarded header)."""
        return request.client.host if request.client else None

    def bearer(self, request: Any) -> bool | None:
        """True for ``Authorization: Bearer <the token>``, False for a Bearer with another token (a guess, counted
        against the client), None when there is no Bearer at all."""
        scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or self.token is None:
            return None
        if same_token(credentials.strip(), self.token):
            return True
        self.failures.failed(self.client(request))
        return False

    def render(self, request: Any, name: str, status: int = 200, **context: Any) -> Any:
        session = self.session(request)
        context.update(schema=self.schema, writable=self.writable, login_enabled=self.token is not None,
                       logged_in=self.logged_in(request), csrf=self.csrf(request),
                       flash=session.pop("flash", None) if session else None, path=request.url.path,
                       max_note=MAX_NOTE_LEN)
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    def refuse_html(self, request: Any, reason: str, status: int = 403) -> Any:
        return self.render(request, "error.html", status=status, reason=reason)

    def schema_missing(self, request: Any, exc: Exception) -> Any:
        """503 for a request that met a missing table or column: the schema's problem in one line."""
        from starlette.responses import JSONResponse

        try:
            with self.conn() as conn:
                require_schema(conn, self.schema)
            reason = safe_error(exc, self.dsn)
        except ConfigError as problem:
            reason = str(problem)
        except psycopg.Error as problem:
            reason = safe_error(problem, self.dsn)
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": reason}, status_code=503)
        return self.refuse_html(request, reason, 503)

    def error(self, request: Any, status: int, reason: str, field: str | None = None,
              headers: dict[str, str] | None = None) -> Any:
        """An error answer: ``{"error", "field"}`` for /api/*, else the error page."""
        from starlette.responses import JSONResponse

        if _api(request):
            body = {"error": reason, **({"field": field} if field else {})}
            return JSONResponse(body, status_code=status, headers=headers)
        response = self.refuse_html(request, f"{field}: {reason}" if field else reason, status)
        response.headers.update(headers or {})
        return response

    def too_many(self, request: Any, wait: int) -> Any:
        """429: this client failed too often; try again in ``wait`` seconds."""
        return self.error(request, 429, f"Too many failed attempts from your address: try again in {wait} s",
                          headers={"Retry-After": str(wait)})

    # -- error handlers ------------------------------------------------------------

    async def http_error(self, request: Any, exc: Any) -> Any:
        """Starlette's HTTPException (404, 405, 413, 400 from the body readers) as JSON or the error page."""
        return self.error(request, exc.status_code, exc.detail, headers=getattr(exc, "headers", None))

    async def field_error(self, request: Any, exc: ScheduleError) -> Any:
        """A field a read refused (a name Postgres cannot hold, a bad limit): 400."""
        return self.error(request, 400, exc.reason, field=exc.field)

    async def server_error(self, request: Any, exc: Exception) -> Any:
        """An uncaught error: a plain 500 without details (websecurity.Guard logs it, redacted)."""
        from starlette.responses import HTMLResponse, JSONResponse

        if _api(request):
            return JSONResponse({"error": "internal error (logged by the dashboard)"}, status_code=500)
        return HTMLResponse("<!doctype html><title>500</title><h1>500</h1><p>Internal error (logged by the "
                            "dashboard).</p>", status_code=500)

    # -- reading -------------------------------------------------------------------

    def reader(self, handler: Any) -> Any:
        """``handler`` (a page or a JSON read) behind the ``private`` gate: without the login or the bearer token
        a page redirects to /login and the API answers 401."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import RedirectResponse

        async def gate(request: Any) -> Any:
            if self.private and not self.logged_in(request):
                wait = self.failures.retry_after(self.client(request))
                if wait and request.headers.get("authorization"):
                    return self.too_many(request, wait)
                if not self.bearer(request):
                    if _api(request):
                        return self.error(request, 401, "log in or send 'Authorization: Bearer <token>'",
                                          headers={"WWW-Authenticate": 'Bearer realm="runledger"'})
                    return RedirectResponse("/login?next=" + quote(request.url.path, safe=""), status_code=303)
            return await run_in_threadpool(handler, request)

        return gate

    def schedules_page(self, request: Any) -> Any:
        """One page of schedules (``?after=NAME&q=TEXT&task=T&limit=N``) with their next fires and last fire."""
        params = request.query_params
        limit = limit_param("limit", params.get("limit"), PAGE_ROWS, MAX_PAGE_ROWS)
        with self.conn() as conn:
            page = schedule_page(conn, limit=limit, after=params.get("after"), q=params.get("q"),
                                 task=params.get("task"))
            fires = next_fires(conn, page.rows, LIST_FIRES)
            last = {str(k): v for k, v in OpsStore(conn).last_fires([r["id"] for r in page.rows]).items()}
            total, exact = schedule_count(conn)
        schedules = [api.public(r) for r in page.rows]
        for s in schedules:
            s["next"], s["last"] = fires[s["id"]], last.get(s["id"])
        return self.render(request, "overview.html", schedules=schedules, total=total, exact=exact,
                           q=page.query.get("q", ""), task=page.query.get("task"), mode=page.mode,
                           paged=bool(params.get("after")), next_page=next_href("/", page, limit))

    def schedule_page(self, request: Any) -> Any:
        name = check_lookup("name", request.path_params["name"])
        with self.conn() as conn:
            row = api.get(conn, name, schema=self.schema)
            if row is None:
                return self.refuse_html(request, f"no schedule named {name!r}", 404)
            fires = api.next_fires(conn, name, PAGE_FIRES, schema=self.schema)
            jobs = api.history(conn, name, limit=HISTORY_ROWS, schema=self.schema)
            plot = lag_plot(OpsStore(conn).lag_series(row["id"], LAG_FIRES))
        return self.render(request, "schedule.html", s=row, fires=fires, jobs=jobs, plot=plot)

    def beats_page(self, request: Any) -> Any:
        with self.conn() as conn:
            beats = OpsStore(conn).beats()
        return self.render(request, "beats.html", beats=beats)

    def problems_page(self, request: Any) -> Any:
        with self.conn() as conn:
            store = OpsStore(conn)
            faulted, failed = store.faulted_schedules(PROBLEM_ROWS + 1), store.failed_jobs(PROBLEM_ROWS)
        return self.render(request, "problems.html", faulted=faulted[:PROBLEM_ROWS], failed=failed,
                           limit=PROBLEM_ROWS, more_faulted=len(faulted) > PROBLEM_ROWS)

    def login_page(self, request: Any) -> Any:
        return self.render(request, "login.html", next=safe_next(request.query_params.get("next")))

    def api_list(self, request: Any) -> Any:
        """``GET /api/schedules?limit=N&after=NAME&q=TEXT&task=T``: at most N schedules (default 100, at most
        1000) by name, with ``Link: <...>; rel="next"`` while more remain."""
        from starlette.responses import JSONResponse

        params = request.query_params
        limit = limit_param("limit", params.get("limit"), PAGE_ROWS, MAX_PAGE_ROWS)
        with self.conn() as conn:
            page = schedule_page(conn, limit=limit, after=params.get("after"), q=params.get("q"),
                                 task=params.get("task"))
        href = next_href("/api/schedules", page, limit)
        headers = {"Link": f'<{href}>; rel="next"'} if href else None
        return JSONResponse(jsonable([api.public(r) for r in page.rows]), headers=headers)

    def api_get(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        name = check_lookup("name", request.path_params["name"])
        limit = history_limit(request.query_params.get("limit"))
        with self.conn() as conn:
            row = api.get(conn, name, schema=self.schema)
            if row is None:
                return JSONResponse({"error": f"no schedule named {name!r}"}, status_code=404)
            fires = api.next_fires(conn, name, PAGE_FIRES, schema=self.schema)
            jobs = api.history(conn, name, limit=limit, schema=self.schema)
        return JSONResponse(jsonable({"schedule": row, "next_fires": fires, "history": jobs}))

    # -- the write actions, shared by the forms and the JSON API ----------------------

    def perform(self, action: str, name: str, fields: dict[str, Any]) -> Any:
        """Run one write through runledger_beat.api; raises ScheduleError on bad input or a missing schedule."""
        if action == "pause":
            return api.pause(self.dsn, name, note=fields.get("note"), schema=self.schema)
        if action == "backfill":
            start = parse_instant("from", fields.get("from") or fields.get("start"))
            end = parse_instant("to", fields.get("to") or fields.get("end"))
            if start is None or end is None:
                raise ScheduleError("from" if start is None else "to", "required")
            return api.backfill(self.dsn, name, start, end, schema=self.schema)
        return getattr(api, action)(self.dsn, name, schema=self.schema)

    async def form_action(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import RedirectResponse

        name, action = request.path_params["name"], request.path_params["action"]
        if action not in ACTIONS:
            return self.refuse_html(request, f"no action {action!r}", 404)
        fields, refusal = await self.checked_form(request)
        if refusal:
            return self.refuse_html(request, refusal)
        check_lookup("name", name)
        try:
            result = await run_in_threadpool(self.perform, action, name, fields)
        except ScheduleError as exc:
            self.session(request)["flash"] = {"error": True, "text": f"{action} refused: {exc.field}: {exc.reason}"}
        else:
            self.session(request)["flash"] = {"error": False, "text": _done(action, result)}
        return RedirectResponse(schedule_path(name), status_code=303)

    async def checked_form(self, request: Any) -> tuple[dict[str, str], str | None]:
        """The posted form, or why it is refused: read-only, not logged in, or a CSRF token that does not match."""
        if not self.writable:
            return {}, f"read-only dashboard: start it with {TOKEN_ENV} set (and without --read-only) to allow changes"
        fields = parse_form(await _body(request))
        if not self.csrf_ok(request, fields):
            return {}, "missing or stale form token (CSRF): reload the page and try again"
        if not self.logged_in(request):
            return {}, "log in first"
        return fields, None

    async def login(self, request: Any) -> Any:
        from starlette.responses import RedirectResponse

        if self.token is None:
            return self.refuse_html(request, f"read-only dashboard: start it with {TOKEN_ENV} set to log in")
        wait = self.failures.retry_after(self.client(request))
        if wait:
            return self.too_many(request, wait)
        fields = parse_form(await _body(request))
        if not self.csrf_ok(request, fields):
            return self.refuse_html(request, "missing or stale form token (CSRF): reload the login page")
        if not same_token(fields.get("token"), self.token):
            self.failures.failed(self.client(request))
            self.session(request)["flash"] = {"error": True, "text": "wrong token"}
            return RedirectResponse("/login?next=" + quote(safe_next(fields.get("next")), safe=""), status_code=303)
        session = self.session(request)
        self.sessions.end(session.get("auth"))
        session.clear()
        session.update(auth=self.sessions.start(), csrf=secrets.token_urlsafe(32))
        return RedirectResponse(safe_next(fields.get("next")), status_code=303)

    async def logout(self, request: Any) -> Any:
        from starlette.responses import RedirectResponse

        if self.token is not None:
            if not self.csrf_ok(request, parse_form(await _body(request))):
                return self.refuse_html(request, "missing or stale form token (CSRF): reload the page")
            self.sessions.end(self.session(request).get("auth"))
            self.session(request).clear()
        return RedirectResponse("/", status_code=303)

    async def api_action(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        name, action = request.path_params["name"], request.path_params["action"]
        if not self.writable:
            return JSONResponse({"error": f"read-only dashboard ({TOKEN_ENV} is not set, or --read-only)"},
                                status_code=403)
        wait = self.failures.retry_after(self.client(request))
        if wait:
            return self.too_many(request, wait)
        if not self.bearer(request):
            return JSONResponse({"error": "a valid 'Authorization: Bearer <token>' is required"}, status_code=403)
        if action not in ACTIONS:
            return JSONResponse({"error": f"no action {action!r}"}, status_code=404)
        body = await _body(request)
        fields = parse_json("body", body) if body.strip() else {}
        if not isinstance(fields, dict):
            return JSONResponse({"error": "the body must be a JSON object", "field": "body"}, status_code=400)
        try:
            result = await run_in_threadpool(self.perform, action, name, fields)
        except ScheduleError as exc:
            status = 404 if exc.field == "name" and "no schedule" in exc.reason else 400
            return JSONResponse({"error": exc.reason, "field": exc.field}, status_code=status)
        return JSONResponse(jsonable(result))


def _done(action: str, result: Any) -> str:
    """The flash message after a successful form action."""
    if action == "trigger":
        return f"triggered: manual ledger row {result['id']}"
    if action == "backfill":
        details = ", ".join(f"{k} {jsonable(v)}" for k, v in (result or {}).items()
                            if not isinstance(v, (list, dict)))
        return f"backfill done: {details}" if details else "backfill done"
    return "paused" if action == "pause" else "resumed"


async def _body(request: Any) -> bytes:
    """The request body; HTTPException 413 when longer than MAX_BODY (read no further)."""
    from starlette.exceptions import HTTPException

    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise HTTPException(413, f"request body larger than {MAX_BODY} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise HTTPException(413, f"request body larger than {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(dsn: str, schema: str = DEFAULT_SCHEMA, token: str | None = None, *, read_only: bool = False,
               private: bool = False, https: bool = False, allowed_hosts: Iterable[str] = ("127.0.0.1",)) -> Any:
    """The Starlette application for ``dsn`` / ``schema``, wrapped in websecurity.Guard.

    ``token`` (at least 16 characters) allows logging in and writes; ``read_only`` refuses every write (a token then
    only serves ``private`` reads); ``private`` makes reads need the login or the bearer token; ``https`` makes the
    cookie Secure and sends HSTS; ``allowed_hosts`` are the Host names served besides the loopback names.
    ConfigError for a DSN psycopg cannot parse, a short token, or ``private`` without a token.
    """
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.middleware.sessions import SessionMiddleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    check_dsn(dsn)
    token = check_token(token) if private or not read_only else None
    if private and token is None:
        raise ConfigError(f"web --private: set {TOKEN_ENV}, the token to log in with")
    board = Dashboard(dsn, schema, token, writable=not read_only, private=private)
    read = board.reader
    routes = [
        Route("/", read(board.schedules_page), name="schedules"),
        Route("/beats", read(board.beats_page), name="beats"),
        Route("/problems", read(board.problems_page), name="problems"),
        Route("/login", board.login_page, name="login_page"),
        Route("/login", board.login, methods=["POST"], name="login"),
        Route("/logout", board.logout, methods=["POST"], name="logout"),
        Route("/api/schedules", read(board.api_list), name="api_list"),
        Route("/api/schedules/{name:path}/{action:str}", board.api_action, methods=["POST"], name="api_action"),
        Route("/api/schedules/{name:path}", read(board.api_get), name="api_get"),
        Route("/schedules/{name:path}/{action:str}", board.form_action, methods=["POST"], name="act"),
        Route("/schedules/{name:path}", read(board.schedule_page), name="schedule"),
        Route("/healthz", lambda request: PlainTextResponse("ok")),
    ]
    middleware = []
    if board.token is not None:
        middleware.append(Middleware(SessionMiddleware, secret_key=session_secret(board.token),
                                     session_cookie=SECURE_SESSION_COOKIE if https else SESSION_COOKIE,
                                     max_age=SESSION_MAX_AGE, same_site="strict", https_only=https))
    handlers = {HTTPException: board.http_error, ScheduleError: board.field_error, Exception: board.server_error,
                **{error: board.schema_missing for error in (psycopg.errors.UndefinedTable,
                                                             psycopg.errors.UndefinedColumn)}}
    return Guard(Starlette(routes=routes, middleware=middleware, exception_handlers=handlers),
                 served_hosts(allowed_hosts), dsn, https=https)


def token_from_env() -> str | None:
    """RUNLEDGER_WEB_TOKEN, None when unset or blank."""
    import os

    return (os.environ.get(TOKEN_ENV) or "").strip() or None


def serve(dsn: str, schema: str, host: str, port: int, token: str | None = None, *, read_only: bool = False,
          private: bool = False, https: bool = False, allowed_hosts: Iterable[str] | None = None) -> None:
    """Run the dashboard until interrupted; the Host names served are ``host`` (unless it is every interface, such
    as 0.0.0.0), ``allowed_hosts`` and the loopback names."""
    import uvicorn

    app = create_app(dsn, schema, token, read_only=read_only, private=private, https=https,
                     allowed_hosts=[host, *(allowed_hosts or ())])
    log = logging.getLogger(__name__)
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    # No forwarded headers: the failed-login count keys on the TCP peer, which a client cannot forge.
    uvicorn.run(app, host=host, port=port, log_level="warning", proxy_headers=False, server_header=False)
