"""`runledger-beat web`: the dashboard (Starlette + Jinja2, served by uvicorn).

Pages (anyone who reaches the port may read them): ``/`` the schedules (timing
in words, zone, state, next three fires, last status and the lag of the last
fire), ``/schedules/{name}`` one schedule (next ten fires, history with
duration and worker, an inline SVG plot of the lag of its last 100 fires),
``/beats`` the running beats, ``/problems`` quarantined or failing schedules
and ledger rows that failed, were lost or expired. JSON: ``GET /api/schedules``
and ``GET /api/schedules/{name}``, datetimes RFC 3339.

Writes (pause with a note, resume, trigger, backfill) are gated by one shared
token, env ``RUNLEDGER_WEB_TOKEN``: the JSON API wants ``Authorization: Bearer
<token>``; the HTML forms want a session from ``/login`` (the token, compared
in constant time) — a signed cookie (Starlette SessionMiddleware, secret
derived from the token, httponly, samesite=strict) — and the session's CSRF
token in every form. Without a token the dashboard is read-only: no buttons,
and every write answers 403 and changes nothing. Every read and write goes
through runledger_beat.api and the stores, one short connection per request.
A request that meets a schema without the runledger tables (dropped, or older
than this code) answers 503 with the line ``runledger-beat`` prints for it.
"""

from __future__ import annotations

import hashlib
import hmac
import inspect
import json
import math
import os
import secrets
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote

import psycopg

from .. import api
from ..db.connect import DEFAULT_SCHEMA, connect
from ..db.migrate import require_schema
from ..db.ops_store import OpsStore
from ..db.redaction import safe_error
from ..errors import ConfigError, ScheduleError
from ..timing.formats import format_rfc3339, parse_instant
from .output import jsonable

TOKEN_ENV = "RUNLEDGER_WEB_TOKEN"
ACTIONS = ("pause", "resume", "trigger", "backfill")
LIST_FIRES = 3
PAGE_FIRES = 10
HISTORY_ROWS = 50
LAG_FIRES = 100
PROBLEM_ROWS = 100
MAX_BODY = 16 * 1024
MAX_NOTE = 1000
SESSION_MAX_AGE = 12 * 3600
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                 b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


# ---------------------------------------------------------------------------
# What the installed API offers (pause notes and backfill arrive in a later release)


def supports_pause_note() -> bool:
    """Whether ``api.pause`` takes ``note=``."""
    return "note" in inspect.signature(api.pause).parameters


def supports_backfill() -> bool:
    """Whether ``api.backfill`` exists."""
    return hasattr(api, "backfill")


# ---------------------------------------------------------------------------
# Words and numbers for the pages


def _amount(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def every_words(seconds: float) -> str:
    """'30 s', '5 min', '2 h', '1 d', '90 s', '0.5 s'."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)} {unit}"
    return f"{_amount(seconds)} s"


def timing_words(s: dict) -> str:
    """A schedule's timing in words: 'every 30 s', 'cron 0 2 * * * (Europe/Paris)', 'once at …'."""
    if s.get("cron"):
        day_and = ", day AND" if s.get("day_and") else ""
        return f"cron {s['cron']} ({s['timezone']}{day_and})"
    if s.get("every") is not None:
        return f"every {every_words(float(s['every']))}"
    if s.get("at"):
        return f"once at {format_rfc3339(s['at'])}"
    return "-"


def seconds_words(value: float | None) -> str:
    """A lag or a duration: '12 ms', '1.250 s', '3 min 20 s', '-' when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    if abs(value) < 1:
        return f"{value * 1000:.0f} ms"
    if abs(value) < 120:
        return f"{value:.3f} s"
    minutes, rest = divmod(int(round(value)), 60)
    return f"{minutes} min {rest} s"


def duration(job: dict) -> float | None:
    """finished_at - started_at in seconds, None unless both are known."""
    if job.get("started_at") and job.get("finished_at"):
        return (job["finished_at"] - job["started_at"]).total_seconds()
    return None


def lag_plot(series: list[dict], width: int = 640, height: int = 160, pad: int = 28) -> dict:
    """The SVG polyline of lag_seconds over the fires: {"points", "count", "max", "min", "width", "height", ...}."""
    lags = [float(r["lag_seconds"]) for r in series if r.get("lag_seconds") is not None]
    out = {"width": width, "height": height, "pad": pad, "count": len(lags), "points": "",
           "max": max(lags, default=0.0), "min": min(lags, default=0.0)}
    if not lags:
        return out
    top, bottom = max(max(lags), 0.001), min(min(lags), 0.0)
    span = top - bottom
    step = (width - 2 * pad) / max(len(lags) - 1, 1)
    points = []
    for i, lag in enumerate(lags):
        x = pad + i * step
        y = height - pad - (lag - bottom) / span * (height - 2 * pad)
        points.append(f"{x:.1f},{y:.1f}")
    out.update(points=" ".join(points), top=top, bottom=bottom,
               zero_y=round(height - pad - (0 - bottom) / span * (height - 2 * pad), 1))
    return out


def schedule_path(name: str) -> str:
    """The page of schedule ``name`` (every character but letters, digits and _.-~ percent-encoded)."""
    return "/schedules/" + quote(name, safe="")


def session_secret(token: str) -> str:
    """The session cookie's signing key: derived from the token, so a new token ends every session."""
    return hmac.new(token.encode(), b"runledger_beat.web session v1", hashlib.sha256).hexdigest()


def same_token(given: str | None, token: str) -> bool:
    """Constant-time comparison of a presented token with the configured one."""
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def parse_form(body: bytes) -> dict[str, str]:
    """An application/x-www-form-urlencoded body as {field: first value}."""
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True, max_num_fields=20)
    return {k: v[0] for k, v in fields.items()}


def safe_next(target: str | None) -> str:
    """A local path to go back to after login (anything else: '/')."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


class _SecurityHeaders:
    """ASGI middleware: a strict Content-Security-Policy (no script at all) and friends on every response."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


# ---------------------------------------------------------------------------
# The application


class Dashboard:
    """The routes' logic over one database / schema; ``token`` None means read-only."""

    def __init__(self, dsn: str, schema: str, token: str | None) -> None:
        from jinja2 import Environment, FileSystemLoader
        from starlette.templating import Jinja2Templates

        self.dsn, self.schema, self.token = dsn, schema, token or None
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
        return self.token is not None and self.session(request).get("auth") is True

    def csrf(self, request: Any) -> str | None:
        """This session's CSRF token (created on first use); None when read-only."""
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

    def render(self, request: Any, name: str, status: int = 200, **context: Any) -> Any:
        session = self.session(request)
        context.update(schema=self.schema, writable=self.token is not None, logged_in=self.logged_in(request),
                       csrf=self.csrf(request), flash=session.pop("flash", None) if session else None,
                       note_supported=supports_pause_note(), backfill_supported=supports_backfill(),
                       path=request.url.path)
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

    # -- pages ---------------------------------------------------------------------

    def schedules_page(self, request: Any) -> Any:
        with self.conn() as conn:
            schedules = api.list_schedules(conn, schema=self.schema)
            last = {str(k): v for k, v in OpsStore(conn).last_fires().items()}
            for s in schedules:
                s["next"] = api.next_fires(conn, s["name"], LIST_FIRES, schema=self.schema)
                s["last"] = last.get(s["id"])
        return self.render(request, "overview.html", schedules=schedules)

    def schedule_page(self, request: Any) -> Any:
        name = request.path_params["name"]
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
            faulted, failed = store.faulted_schedules(), store.failed_jobs(PROBLEM_ROWS)
        return self.render(request, "problems.html", faulted=faulted, failed=failed, limit=PROBLEM_ROWS)

    def login_page(self, request: Any) -> Any:
        return self.render(request, "login.html", next=safe_next(request.query_params.get("next")))

    # -- the write actions, shared by the forms and the JSON API ----------------------

    def perform(self, action: str, name: str, fields: dict[str, Any]) -> Any:
        """Run one write through runledger_beat.api; raises ScheduleError on bad input or a missing schedule."""
        if action == "pause":
            note = fields.get("note")
            if note is not None and not isinstance(note, str):
                raise ScheduleError("note", "must be a string")
            note = (note or "").strip() or None
            if note is not None and len(note) > MAX_NOTE:
                raise ScheduleError("note", f"at most {MAX_NOTE} characters")
            if supports_pause_note():
                return api.pause(self.dsn, name, note=note, schema=self.schema)
            if note is not None:
                raise ScheduleError("note", "this runledger_beat cannot store pause notes (upgrade it)")
            return api.pause(self.dsn, name, schema=self.schema)
        if action == "backfill":
            if not supports_backfill():
                raise ScheduleError("backfill", "this runledger_beat has no backfill (upgrade it)")
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
        try:
            result = await run_in_threadpool(self.perform, action, name, fields)
        except ScheduleError as exc:
            self.session(request)["flash"] = {"error": True, "text": f"{action} refused: {exc.field}: {exc.reason}"}
        else:
            self.session(request)["flash"] = {"error": False, "text": _done(action, result)}
        return RedirectResponse(schedule_path(name), status_code=303)

    async def checked_form(self, request: Any) -> tuple[dict[str, str], str | None]:
        """The posted form, or why it is refused: read-only, not logged in, or a CSRF token that does not match."""
        if self.token is None:
            return {}, f"read-only dashboard: start it with {TOKEN_ENV} set to allow changes"
        body = await _body(request)
        if body is None:
            return {}, "request too large"
        fields = parse_form(body)
        if not self.csrf_ok(request, fields):
            return {}, "missing or stale form token (CSRF): reload the page and try again"
        if not self.logged_in(request):
            return {}, "log in first"
        return fields, None

    async def login(self, request: Any) -> Any:
        from starlette.responses import RedirectResponse

        if self.token is None:
            return self.refuse_html(request, f"read-only dashboard: start it with {TOKEN_ENV} set to log in")
        body = await _body(request)
        fields = parse_form(body or b"")
        if body is None or not self.csrf_ok(request, fields):
            return self.refuse_html(request, "missing or stale form token (CSRF): reload the login page")
        if not same_token(fields.get("token"), self.token):
            self.session(request)["flash"] = {"error": True, "text": "wrong token"}
            return RedirectResponse("/login?next=" + quote(safe_next(fields.get("next")), safe=""), status_code=303)
        session = self.session(request)
        session.clear()
        session.update(auth=True, csrf=secrets.token_urlsafe(32))
        return RedirectResponse(safe_next(fields.get("next")), status_code=303)

    async def logout(self, request: Any) -> Any:
        from starlette.responses import RedirectResponse

        if self.token is not None:
            if not self.csrf_ok(request, parse_form(await _body(request) or b"")):
                return self.refuse_html(request, "missing or stale form token (CSRF): reload the page")
            self.session(request).clear()
        return RedirectResponse("/", status_code=303)

    # -- JSON ------------------------------------------------------------------------

    def api_list(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        with self.conn() as conn:
            rows = api.list_schedules(conn, schema=self.schema)
        return JSONResponse(jsonable(rows))

    def api_get(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        name = request.path_params["name"]
        with self.conn() as conn:
            row = api.get(conn, name, schema=self.schema)
            if row is None:
                return JSONResponse({"error": f"no schedule named {name!r}"}, status_code=404)
            fires = api.next_fires(conn, name, PAGE_FIRES, schema=self.schema)
            jobs = api.history(conn, name, limit=HISTORY_ROWS, schema=self.schema)
        return JSONResponse(jsonable({"schedule": row, "next_fires": fires, "history": jobs}))

    async def api_action(self, request: Any) -> Any:
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        name, action = request.path_params["name"], request.path_params["action"]
        if self.token is None:
            return JSONResponse({"error": f"read-only dashboard ({TOKEN_ENV} is not set)"}, status_code=403)
        given = request.headers.get("authorization", "")
        scheme, _, credentials = given.partition(" ")
        if scheme.lower() != "bearer" or not same_token(credentials.strip(), self.token):
            return JSONResponse({"error": "a valid 'Authorization: Bearer <token>' is required"}, status_code=403)
        if action not in ACTIONS:
            return JSONResponse({"error": f"no action {action!r}"}, status_code=404)
        fields, error = await _json_body(request)
        if error:
            return JSONResponse({"error": error}, status_code=400)
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


async def _body(request: Any) -> bytes | None:
    """The request body, None when longer than MAX_BODY."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


async def _json_body(request: Any) -> tuple[dict, str | None]:
    """An optional JSON object body ({} when empty), or why it is unusable."""
    body = await _body(request)
    if body is None:
        return {}, "request too large"
    if not body.strip():
        return {}, None
    try:
        value = json.loads(body)
    except ValueError:
        return {}, "the body must be a JSON object"
    if not isinstance(value, dict):
        return {}, "the body must be a JSON object"
    return value, None


def create_app(dsn: str, schema: str = DEFAULT_SCHEMA, token: str | None = None) -> Any:
    """The Starlette application for ``dsn`` / ``schema``; writes need ``token`` (None: read-only)."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    board = Dashboard(dsn, schema, token)
    routes = [
        Route("/", board.schedules_page, name="schedules"),
        Route("/beats", board.beats_page, name="beats"),
        Route("/problems", board.problems_page, name="problems"),
        Route("/login", board.login_page, name="login_page"),
        Route("/login", board.login, methods=["POST"], name="login"),
        Route("/logout", board.logout, methods=["POST"], name="logout"),
        Route("/api/schedules", board.api_list, name="api_list"),
        Route("/api/schedules/{name:path}/{action:str}", board.api_action, methods=["POST"], name="api_action"),
        Route("/api/schedules/{name:path}", board.api_get, name="api_get"),
        Route("/schedules/{name:path}/{action:str}", board.form_action, methods=["POST"], name="act"),
        Route("/schedules/{name:path}", board.schedule_page, name="schedule"),
        Route("/healthz", lambda request: PlainTextResponse("ok")),
    ]
    middleware = [Middleware(_SecurityHeaders)]
    if board.token is not None:
        from starlette.middleware.sessions import SessionMiddleware
        middleware.append(Middleware(SessionMiddleware, secret_key=session_secret(board.token),
                                     session_cookie="runledger_session", max_age=SESSION_MAX_AGE,
                                     same_site="strict", https_only=False))
    missing = {error: board.schema_missing for error in (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn)}
    return Starlette(routes=routes, middleware=middleware, exception_handlers=missing)


def token_from_env() -> str | None:
    """RUNLEDGER_WEB_TOKEN, None when unset or blank."""
    return (os.environ.get(TOKEN_ENV) or "").strip() or None


def serve(dsn: str, schema: str, host: str, port: int, token: str | None = None) -> None:
    """Run the dashboard until interrupted."""
    import uvicorn

    uvicorn.run(create_app(dsn, schema, token), host=host, port=port, log_level="warning")
