"""``runledger-beat``: manage schedules and read the ledger from the shell.

DSN: --dsn, else env RUNLEDGER_DSN, else the --app Celery app's runledger_dsn.
Schema: --schema, else env RUNLEDGER_SCHEMA, else "runledger".
Exit codes: 0 done; 2 bad usage or validation ("error: <field>: <reason>" on
stderr, nothing written); 1 runtime failure (one line, never the password).

``--json`` shapes (datetimes RFC 3339 UTC strings, ids strings):

- add / update / pause / resume / show's "schedule" / list items: a schedule object
  {"id", "name", "task", "organization_id", "kind", "cron", "day_and", "every", "at",
  "timezone", "args", "kwargs", "options", "max_jitter", "misfire", "grace",
  "overlap", "start", "end", "active", "source", "anchor_at", "next_fire_at",
  "last_fired_at", "created_at", "updated_at"}
- list: [schedule, ...]
- show: {"schedule": schedule, "next_fires": [time, ...5], "history": [job, ...5]}
- history: [job, ...]; trigger: job, where job = {"id", "schedule_id",
  "schedule_name", "scheduled_for", "task", "organization_id", "payload", "options",
  "stage", "status", "created_at", "sent_at", "started_at", "finished_at",
  "dispatch_attempts", "last_error", "worker", "retries", "duplicates"}
- remove: {"removed": name}; migrate: {"applied": [file, ...]};
  sync: {"created", "updated", "unchanged", "deactivated", "errors": {name: text}}
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from datetime import datetime
from typing import Any

import psycopg

from . import api
from .db import ConfigError, connect, migrate, redact_dsn, safe_error
from .timeengine import ScheduleError, fire_times, format_rfc3339


class UsageError(Exception):
    """Bad command line input (exit 2)."""


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(_jsonable(data), indent=2, sort_keys=True) if getattr(args, "json", False) else text)


def _json_arg(field: str, text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ScheduleError(field, f"not valid JSON ({exc.msg})") from None


def _load_app(path: str) -> Any:
    from celery.utils.imports import symbol_by_name
    try:
        app = symbol_by_name(path)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UsageError(f"--app: cannot import {path!r}: {exc}") from None
    if not hasattr(app, "conf"):
        app = getattr(app, "app", None) or getattr(app, "celery", None)
    if app is None or not hasattr(app, "conf"):
        raise UsageError(f"--app: {path!r} is not a Celery app")
    return app


def _dsn(args: argparse.Namespace) -> str:
    if args.dsn:
        return args.dsn
    if os.environ.get("RUNLEDGER_DSN"):
        return os.environ["RUNLEDGER_DSN"]
    if getattr(args, "app", None):
        dsn = _load_app(args.app).conf.get("runledger_dsn")
        if dsn:
            return dsn
    raise UsageError("no database: give --dsn, set RUNLEDGER_DSN, or --app with runledger_dsn")


def _definition_args(p: argparse.ArgumentParser, update: bool) -> None:
    p.add_argument("name")
    p.add_argument("--task", required=not update)
    form = p.add_mutually_exclusive_group(required=not update)
    form.add_argument("--cron")
    form.add_argument("--every", help="duration: 30s, 5m, 1h30m or seconds")
    form.add_argument("--at", help="ISO 8601 instant for a one-off")
    p.add_argument("--tz", dest="timezone")
    p.add_argument("--args")
    p.add_argument("--kwargs")
    p.add_argument("--queue")
    p.add_argument("--routing-key")
    p.add_argument("--priority", type=int)
    p.add_argument("--expires", help="seconds or duration")
    p.add_argument("--jitter", type=int)
    p.add_argument("--misfire")
    p.add_argument("--grace", help="seconds or duration")
    p.add_argument("--overlap")
    p.add_argument("--start")
    p.add_argument("--end")
    p.add_argument("--org")
    p.add_argument("--day-and", action="store_true", default=None)
    if update:
        state = p.add_mutually_exclusive_group()
        state.add_argument("--paused", dest="active", action="store_false", default=None)
        state.add_argument("--active", dest="active", action="store_true", default=None)
    else:
        p.add_argument("--paused", dest="active", action="store_false", default=True)
    p.add_argument("--json", action="store_true")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for api.create/update from the given options only."""
    out: dict[str, Any] = {}
    simple = {"task": "task", "cron": "cron", "every": "every", "at": "at", "timezone": "timezone",
              "jitter": "max_jitter", "misfire": "misfire", "grace": "grace", "overlap": "overlap",
              "start": "start", "end": "end", "org": "organization_id", "day_and": "day_and",
              "active": "active"}
    for attr, key in simple.items():
        value = getattr(args, attr, None)
        if value is not None:
            out[key] = value
    if args.args is not None:
        out["args"] = _json_arg("args", args.args)
    if args.kwargs is not None:
        out["kwargs"] = _json_arg("kwargs", args.kwargs)
    options = {k: getattr(args, a) for k, a in (("queue", "queue"), ("routing_key", "routing_key"),
                                                 ("priority", "priority"), ("expires", "expires"))
               if getattr(args, a) is not None}
    if options:
        out["options"] = options
    return out


def _line(s: dict) -> str:
    when = s["cron"] or (f"every {s['every']:g}s" if s["every"] is not None else f"at {s['at']}")
    nxt = format_rfc3339(s["next_fire_at"]) if s["next_fire_at"] else "-"
    state = "active" if s["active"] else "paused"
    return f"{s['name']}\t{s['task']}\t{when}\t{s['timezone']}\t{state}\tnext={nxt}"


def _job_line(j: dict) -> str:
    when = format_rfc3339(j["scheduled_for"]) if j["scheduled_for"] else "-"
    return f"{when}\t{j['stage']}\t{j['status']}\t{j['id']}" + (f"\t{j['last_error']}" if j["last_error"] else "")


def _cmd(args: argparse.Namespace, dsn: str) -> int:
    s = args.schema
    c = args.command
    if c == "migrate":
        with connect(dsn, "public") as conn:
            applied = migrate(conn, s)
        _emit(args, {"applied": applied}, "applied: " + (", ".join(applied) or "nothing (up to date)"))
    elif c == "add":
        row = api.create(dsn, args.name, schema=s, **_fields(args))
        _emit(args, row, "added " + _line(row))
    elif c == "update":
        row = api.update(dsn, args.name, schema=s, **_fields(args))
        _emit(args, row, "updated " + _line(row))
    elif c == "list":
        rows = api.list_schedules(dsn, task=args.task, schema=s)
        _emit(args, rows, "\n".join(_line(r) for r in rows) or "no schedules")
    elif c == "show":
        row = api.get(dsn, args.name, schema=s)
        if row is None:
            raise ScheduleError("name", f"no schedule named {args.name!r}")
        from .schedule_row import timing_from_row
        with connect(dsn, s, autocommit=True) as conn:
            raw = api._one(conn, api.queries.api_get_schedule, {"name": args.name})
            now = api._db_now(conn)
        fires = fire_times(timing_from_row(raw), now, uuid.UUID(row["id"]), 5) if row["active"] else []
        jobs = api.history(dsn, args.name, limit=5, schema=s)
        data = {"schedule": row, "next_fires": fires, "history": jobs}
        text = "\n".join([f"{k}: {_jsonable(v)}" for k, v in row.items()]
                         + ["next fires:"] + [f"  {format_rfc3339(f)}" for f in fires]
                         + ["history:"] + [f"  {_job_line(j)}" for j in jobs])
        _emit(args, data, text)
    elif c in ("pause", "resume"):
        row = getattr(api, c)(dsn, args.name, schema=s)
        _emit(args, row, f"{c}d " + _line(row))
    elif c == "remove":
        api.remove(dsn, args.name, schema=s)
        _emit(args, {"removed": args.name}, f"removed {args.name}")
    elif c == "trigger":
        job = api.trigger(dsn, args.name, schema=s)
        _emit(args, job, f"triggered {args.name}: ledger row {job['id']} (pending; a running beat publishes it)")
    elif c == "history":
        jobs = api.history(dsn, args.name, limit=args.limit, status=args.status, schema=s)
        _emit(args, jobs, "\n".join(_job_line(j) for j in jobs) or "no ledger rows")
    elif c == "sync":
        from .importer import sync_beat_schedule
        app = _load_app(args.app)
        with connect(dsn, s) as conn:
            report = sync_beat_schedule(conn, app, app.conf.beat_schedule or {})
        _emit(args, report, ", ".join(f"{k}={v}" for k, v in report.items() if k != "errors")
              + "".join(f"\nskipped: {e}" for e in report["errors"].values()))
    return 0


_PLUGINS = {"preview": ("runledger_beat.preview", "add_preview_arguments", "run_preview"),
            "stats": ("runledger_beat.stats", "add_stats_arguments", "run_stats"),
            "demo": ("runledger_beat.demo", "add_demo_arguments", "run_demo")}


def _plugin(name: str) -> tuple[Any, Any] | None:
    import importlib
    module, add, run = _PLUGINS[name]
    try:
        mod = importlib.import_module(module)
        return getattr(mod, add), getattr(mod, run)
    except (ImportError, AttributeError):
        return None


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runledger-beat", description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", help="Postgres DSN (else env RUNLEDGER_DSN, else --app's runledger_dsn)")
    parser.add_argument("--schema", default=os.environ.get("RUNLEDGER_SCHEMA", "runledger"))
    parser.add_argument("--app", help="Celery app, e.g. proj.celery:app or proj.celery")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("migrate", help="create or upgrade the tables")
    p.add_argument("--json", action="store_true")
    _definition_args(sub.add_parser("add", help="create a schedule"), update=False)
    _definition_args(sub.add_parser("update", help="change a schedule (only given options)"), update=True)
    p = sub.add_parser("list", help="list schedules")
    p.add_argument("--task")
    p.add_argument("--json", action="store_true")
    for name in ("show", "pause", "resume", "remove", "trigger"):
        p = sub.add_parser(name)
        p.add_argument("name")
        p.add_argument("--json", action="store_true")
    p = sub.add_parser("history", help="latest ledger rows of a schedule")
    p.add_argument("name")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--status")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("sync", help="import a Celery app's beat_schedule")
    p.add_argument("--app", dest="app", required=False, default=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true")
    # Plugins are imported only when their subcommand is asked for.
    wanted = next((a for a in argv if a in _PLUGINS), None)
    for name in _PLUGINS:
        p = sub.add_parser(name, help=f"{name} (see runledger-beat {name} --help)")
        if name == wanted:
            found = _plugin(name)
            if found:
                found[0](p)
                p.set_defaults(_run=found[1])
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    if args.command in _PLUGINS:
        run = getattr(args, "_run", None)
        if run is None:
            print(f"error: {args.command}: {_PLUGINS[args.command][0]} is not available", file=sys.stderr)
            return 1
        try:
            return int(run(args) or 0)
        except ScheduleError as exc:
            print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
            return 2
    if args.command == "sync" and not getattr(args, "app", None):
        print("error: --app: sync needs --app proj.celery", file=sys.stderr)
        return 2
    dsn = ""
    try:
        dsn = _dsn(args)
        return _cmd(args, dsn)
    except ScheduleError as exc:
        print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
        return 2
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        print(f"error: database {redact_dsn(dsn)}: {safe_error(exc, dsn)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
