"""`runledger-beat web`: a small read-mostly dashboard (Starlette + Jinja2, served by uvicorn).

Pages: ``/`` lists the running beats and every schedule; ``/schedules/{name}``
shows one schedule, its next fires and its latest ledger rows. With
``allow_actions`` the schedule page has Pause / Resume / Trigger buttons
(``POST /schedules/{name}/{action}``); without it the dashboard only reads.
There is no login: bind it to loopback (the default) or put it behind your
own authenticating proxy. Every read goes through runledger_beat.api and the
Store, one short connection per request.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

from .db import DEFAULT_SCHEMA, connect
from .formats import format_rfc3339

ACTIONS = ("pause", "resume", "trigger")
HISTORY_ROWS = 50


def create_app(dsn: str, schema: str = DEFAULT_SCHEMA, allow_actions: bool = False) -> Any:
    """The Starlette application for ``dsn`` / ``schema``."""
    from starlette.applications import Starlette
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, RedirectResponse
    from starlette.routing import Route
    from starlette.templating import Jinja2Templates

    from . import api
    from .store import Store
    from .timeengine import ScheduleError

    folder = resources.files("runledger_beat").joinpath("templates")
    templates = Jinja2Templates(directory=str(folder))
    templates.env.filters["when"] = lambda dt: format_rfc3339(dt) if dt else "-"
    base = {"schema": schema, "allow_actions": allow_actions}

    def overview(request: Request) -> Any:
        with connect(dsn, schema, autocommit=True, application_name="runledger_beat.web") as conn:
            beats = Store(conn).beats()
            schedules = api.list_schedules(conn, schema=schema)
        return templates.TemplateResponse(request, "overview.html", dict(base, beats=beats, schedules=schedules))

    def schedule(request: Request) -> Any:
        name = request.path_params["name"]
        with connect(dsn, schema, autocommit=True, application_name="runledger_beat.web") as conn:
            row = api.get(conn, name, schema=schema)
            if row is None:
                raise HTTPException(404, f"no schedule named {name!r}")
            fires = api.next_fires(conn, name, 5, schema=schema)
            jobs = api.history(conn, name, limit=HISTORY_ROWS, schema=schema)
        return templates.TemplateResponse(request, "schedule.html", dict(base, s=row, fires=fires, jobs=jobs))

    def act(request: Request) -> Any:
        name, action = request.path_params["name"], request.path_params["action"]
        if not allow_actions:
            raise HTTPException(403, "actions are off (start `runledger-beat web --allow-actions`)")
        if action not in ACTIONS:
            raise HTTPException(404, f"no action {action!r}")
        try:
            getattr(api, action)(dsn, name, schema=schema)
        except ScheduleError as exc:
            raise HTTPException(404, exc.reason) from None
        return RedirectResponse(request.url_for("schedule", name=name), status_code=303)

    def healthz(request: Request) -> Any:
        return PlainTextResponse("ok")

    routes = [Route("/", overview, name="overview"),
              Route("/schedules/{name:path}/{action:str}", act, methods=["POST"], name="act"),
              Route("/schedules/{name:path}", schedule, name="schedule"),
              Route("/healthz", healthz)]
    return Starlette(routes=routes)


def serve(dsn: str, schema: str, host: str, port: int, allow_actions: bool) -> None:
    """Run the dashboard until interrupted."""
    import uvicorn

    uvicorn.run(create_app(dsn, schema, allow_actions), host=host, port=port, log_level="warning")
