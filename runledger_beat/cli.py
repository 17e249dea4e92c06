"""``runledger-beat``: manage schedules and read the ledger from the shell.

DSN: --dsn, else --dsn-file, else env RUNLEDGER_DSN, else the --app Celery app's
runledger_dsn (a --dsn carrying a password gets a warning: ps shows it).
Schema: --schema, else env RUNLEDGER_SCHEMA, else "runledger". The global
options (--dsn, --schema, --app) go before or after the subcommand.
Exit codes: 0 done; 2 bad usage or validation ("error: <field>: <reason>" on
stderr, nothing written; a DSN psycopg cannot parse too); 1 runtime failure
(one line, never the password). Every numeric option has a range, shown in its
--help ("1..10000"); a value outside it exits 2 before anything runs.
Every command that reads the tables (all but migrate, preview and demo) first
checks the schema: one without the runledger tables, or at an older migration,
exits 2 with 'error: schema "<schema>" has no runledger tables (run
`runledger-beat migrate`)' (or '... is at migration N of M ...'); a database
newer than this code exits 2 with its refusal line. A command whose extra is
not installed (web, demo) exits 2 with "<command>: needs <package> (pip install
'runledger-beat[<extra>]')". ``runledger-beat --version`` prints the version.

``--json`` shapes (datetimes RFC 3339 UTC strings, ids strings):

- add / update / pause / resume / show's "schedule" / list items: a schedule object
  {"id", "name", "task", "organization_id", "kind", "cron", "day_and", "every", "at",
  "timezone", "args", "kwargs", "options", "max_jitter", "misfire", "grace",
  "overlap", "start", "end", "active", "source", "skip_dates", "calendar",
  "overlap_terminate", "anchor_at", "next_fire_at", "last_fired_at", "created_at",
  "updated_at", "pause_note", "paused_at", "paused_by", "paused_by_application"}
- list: [schedule, ...]
- show: {"schedule": schedule, "next_fires": [time, ...5], "history": [job, ...5]}
- history: [job, ...]; trigger: job, where job = {"id", "schedule_id",
  "schedule_name", "scheduled_for", "task", "organization_id", "payload", "options",
  "stage", "status", "created_at", "sent_at", "started_at", "finished_at",
  "dispatch_attempts", "last_error", "worker", "retries", "duplicates", "backfill",
  "released_at"}
- remove: {"removed": name}; migrate: {"applied": [file, ...]};
  sync: {"created", "updated", "unchanged", "deactivated", "errors": {name: text}};
  stats: [{"name", "total", "counts", "send_lag_p50", ...}]; preview: [time, ...]
- beats: [{"id", "host", "pid", "version", "started_at", "last_tick_at", "preparing", "age_seconds"}]
- health: {"healthy", "beats", "age_seconds", "max_age"} (exit 1 when not healthy)
- doctor: {"ok", "checks": [{"name", "verdict", "detail"}]} (verdict ok / warn / FAIL; exit 1 on a FAIL)
- backfill: {"schedule", "from", "to", "slots", "created", "existing", "ids": [id, ...]}
- calendar add: {"name", "dates", "created_at", "updated_at"}; calendar list: [that + "schedules"];
  calendar remove: {"removed": name}
- audit: [{"id", "at", "who", "application_name", "operation", "schedule_id",
  "schedule_name", "before", "after"}, ...] oldest first (before/after: changed columns only)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import psycopg

from . import __version__, api
from .argtypes import Bounded
from .db import APPLICATION_NAME, ConfigError, check_dsn, connect, migrate, redact_dsn, require_schema, safe_error
from .extras import require
from .formats import format_rfc3339, jsonable, parse_duration
from .limits import MAX_JITTER_SECONDS, MAX_PRIORITY, MIN_PRIORITY
from .redaction import dsn_has_password, read_dsn_file
from .spec import check_seconds, parse_json
from .timeengine import ScheduleError

#: The application_name of the command line's database sessions (the audit log and pause notes show it).
CLI_APPLICATION_NAME = "runledger-beat"
#: Most rows `history --limit` prints.
MAX_HISTORY_ROWS = 10000
#: Most slots `backfill --max` lets one range hold.
MAX_BACKFILL_SLOTS = 1_000_000
#: Longest `health --max-age`: a day.
MAX_HEALTH_AGE = 86400


class UsageError(Exception):
    """Bad command line input (exit 2)."""


# ---------------------------------------------------------------------------
# Output


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(jsonable(data), indent=2, sort_keys=True) if getattr(args, "json", False) else text)


def _line(s: dict) -> str:
    when = s["cron"] or (f"every {s['every']:g}s" if s["every"] is not None else f"at {s['at']}")
    nxt = format_rfc3339(s["next_fire_at"]) if s["next_fire_at"] else "-"
    state = "active" if s["active"] else "paused"
    if s.get("quarantined_at"):
        state = f"QUARANTINED ({s.get('last_error')})"
    elif s.get("failures"):
        state += f", failing ({s['failures']}x: {s.get('last_error')})"
    line = f"{s['name']}\t{s['task']}\t{when}\t{s['timezone']}\t{state}\tnext={nxt}"
    if s.get("paused_at"):
        line += f"\tpaused {format_rfc3339(s['paused_at'])} by {s['paused_by']} ({s['paused_by_application']})"
    if s.get("pause_note"):
        line += f"\tnote={s['pause_note']}"
    return line


def _job_line(j: dict) -> str:
    when = format_rfc3339(j["scheduled_for"]) if j["scheduled_for"] else "-"
    return f"{when}\t{j['stage']}\t{j['status']}\t{j['id']}" + (f"\t{j['last_error']}" if j["last_error"] else "")


# ---------------------------------------------------------------------------
# Input


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
        if dsn_has_password(args.dsn):
            print("warning: --dsn carries a password, which other users can read in the process list; "
                  "prefer RUNLEDGER_DSN or --dsn-file", file=sys.stderr)
        return args.dsn
    if args.dsn_file:
        return read_dsn_file(args.dsn_file)
    if os.environ.get("RUNLEDGER_DSN"):
        return os.environ["RUNLEDGER_DSN"]
    if args.app:
        dsn = _load_app(args.app).conf.get("runledger_dsn")
        if dsn:
            return dsn
    raise UsageError("no database: give --dsn, set RUNLEDGER_DSN, or --app with runledger_dsn")


_SIMPLE_FIELDS = {"task": "task", "cron": "cron", "every": "every", "at": "at", "timezone": "timezone",
                  "jitter": "max_jitter", "misfire": "misfire", "grace": "grace", "overlap": "overlap",
                  "start": "start", "end": "end", "org": "organization_id", "day_and": "day_and",
                  "active": "active", "skip_dates": "skip_dates", "calendar": "calendar",
                  "overlap_terminate": "overlap_terminate"}
_OPTION_FLAGS = ("queue", "routing_key", "priority", "expires")


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for api.create/update from the given options only."""
    out = {key: getattr(args, attr) for attr, key in _SIMPLE_FIELDS.items() if getattr(args, attr, None) is not None}
    for field in ("args", "kwargs"):
        if getattr(args, field) is not None:
            out[field] = parse_json(field, getattr(args, field))
    options = {k: getattr(args, k) for k in _OPTION_FLAGS if getattr(args, k) is not None}
    if options:
        out["options"] = options
    return out


# ---------------------------------------------------------------------------
# Commands: each takes the parsed arguments and the DSN, prints, returns the exit code


def cmd_migrate(args: argparse.Namespace, dsn: str) -> int:
    with connect(dsn, "public") as conn:
        applied = migrate(conn, args.schema)
    _emit(args, {"applied": applied}, "applied: " + (", ".join(applied) or "nothing (up to date)"))
    return 0


def cmd_add(args: argparse.Namespace, dsn: str) -> int:
    row = api.create(dsn, args.name, schema=args.schema, **_fields(args))
    _emit(args, row, "added " + _line(row))
    return 0


def cmd_update(args: argparse.Namespace, dsn: str) -> int:
    row = api.update(dsn, args.name, schema=args.schema, **_fields(args))
    _emit(args, row, "updated " + _line(row))
    return 0


def cmd_list(args: argparse.Namespace, dsn: str) -> int:
    rows = api.list_schedules(dsn, task=args.task, schema=args.schema)
    _emit(args, rows, "\n".join(_line(r) for r in rows) or "no schedules")
    return 0


def cmd_show(args: argparse.Namespace, dsn: str) -> int:
    row = api.get(dsn, args.name, schema=args.schema)
    if row is None:
        raise ScheduleError("name", f"no schedule named {args.name!r}")
    fires = api.next_fires(dsn, args.name, 5, schema=args.schema)
    jobs = api.history(dsn, args.name, limit=5, schema=args.schema)
    text = "\n".join([f"{k}: {jsonable(v)}" for k, v in row.items()]
                     + ["next fires:"] + [f"  {format_rfc3339(f)}" for f in fires]
                     + ["history:"] + [f"  {_job_line(j)}" for j in jobs])
    _emit(args, {"schedule": row, "next_fires": fires, "history": jobs}, text)
    return 0


def cmd_pause(args: argparse.Namespace, dsn: str) -> int:
    row = api.pause(dsn, args.name, note=args.note, schema=args.schema)
    _emit(args, row, "paused " + _line(row))
    return 0


def cmd_resume(args: argparse.Namespace, dsn: str) -> int:
    row = api.resume(dsn, args.name, schema=args.schema)
    _emit(args, row, "resumed " + _line(row))
    return 0


def cmd_remove(args: argparse.Namespace, dsn: str) -> int:
    api.remove(dsn, args.name, schema=args.schema)
    _emit(args, {"removed": args.name}, f"removed {args.name}")
    return 0


def cmd_trigger(args: argparse.Namespace, dsn: str) -> int:
    job = api.trigger(dsn, args.name, schema=args.schema)
    _emit(args, job, f"triggered {args.name}: ledger row {job['id']} (pending; a running beat publishes it)")
    return 0


def cmd_history(args: argparse.Namespace, dsn: str) -> int:
    jobs = api.history(dsn, args.name, limit=args.limit, status=args.status, schema=args.schema)
    _emit(args, jobs, "\n".join(_job_line(j) for j in jobs) or "no ledger rows")
    return 0


def cmd_sync(args: argparse.Namespace, dsn: str) -> int:
    from .importer import sync_beat_schedule
    if not args.app:
        raise UsageError("--app: sync needs --app proj.celery")
    app = _load_app(args.app)
    with connect(dsn, args.schema) as conn:
        report = sync_beat_schedule(conn, app, app.conf.beat_schedule or {})
    _emit(args, report, ", ".join(f"{k}={v}" for k, v in report.items() if k != "errors")
          + "".join(f"\nskipped: {e}" for e in report["errors"].values()))
    return 0


def cmd_stats(args: argparse.Namespace, dsn: str) -> int:
    from .stats import render, stats
    since = check_seconds("since", args.since) if args.since else None
    with connect(dsn, args.schema, autocommit=True) as conn:
        items = stats(conn, args.name, since)
    _emit(args, items, render(items))
    return 0


def cmd_beats(args: argparse.Namespace, dsn: str) -> int:
    from .store import Store
    with connect(dsn, args.schema, autocommit=True, application_name="runledger_beat.cli") as conn:
        rows = Store(conn).beats()
    lines = [f"{r['host']}\tpid={r['pid']}\tv{r['version']}\tstarted={format_rfc3339(r['started_at'])}"
             f"\tlast_tick={r['age_seconds']:.1f}s ago" + ("\tpreparing" if r["preparing"] else "") + f"\t{r['id']}"
             for r in rows]
    _emit(args, rows, "\n".join(lines) or "no beats")
    return 0


def cmd_health(args: argparse.Namespace, dsn: str) -> int:
    from .store import Store
    try:
        with connect(dsn, args.schema, autocommit=True, connect_timeout=max(1, min(5, int(args.max_age))),
                     application_name="runledger_beat.health") as conn:
            row = Store(conn).freshest_beat(socket.gethostname() if args.this_host else None)
    except psycopg.Error as exc:
        row = {"beats": 0, "age_seconds": None, "error": safe_error(exc, dsn)}
    age = row["age_seconds"]
    healthy = age is not None and age <= args.max_age
    if healthy:
        text = f"ok: a beat ticked {age:.1f}s ago ({row['beats']} beat(s) registered)"
    elif row.get("error"):
        text = f"unhealthy: database {redact_dsn(dsn)}: {row['error']}"
    elif age is None:
        text = "unhealthy: no beat has registered" + (" on this host" if args.this_host else "")
    else:
        text = f"unhealthy: the freshest beat ticked {age:.1f}s ago (more than {args.max_age:g}s)"
    _emit(args, dict(row, healthy=healthy, max_age=args.max_age), text)
    return 0 if healthy else 1


def cmd_doctor(args: argparse.Namespace, dsn: str) -> int:
    from .doctor import as_json, diagnose
    checks = diagnose(dsn, args.schema, _load_app(args.app) if args.app else None)
    report = as_json(checks)
    _emit(args, report, "\n".join(c.line() for c in checks))
    return 0 if report["ok"] else 1


def cmd_web(args: argparse.Namespace, dsn: str) -> int:
    if args.allow_actions:
        raise UsageError("web: --allow-actions is gone: set RUNLEDGER_WEB_TOKEN to allow changes "
                         "(API: Authorization: Bearer <token>; pages: log in with it)")
    from .web import serve, token_from_env
    serve(dsn, args.schema, args.host, args.port, token_from_env(), read_only=args.read_only,
          private=args.private, https=args.https, allowed_hosts=args.allow_host)
    return 0


def cmd_backfill(args: argparse.Namespace, dsn: str) -> int:
    result = api.backfill(dsn, args.name, args.start, args.end, args.max, schema=args.schema)
    _emit(args, result, f"backfilled {args.name}: {result['slots']} slot(s), {result['created']} recorded, "
                        f"{result['existing']} already in the ledger" + ("; a running beat publishes them"
                                                                         if result["created"] else ""))
    return 0


def _audit_line(entry: dict) -> list[Any]:
    changed = sorted(set(entry["before"] or {}) | set(entry["after"] or {}))
    if entry["operation"] == "UPDATE":
        before, after = jsonable(entry["before"]), jsonable(entry["after"])
        what = ", ".join(f"{k}: {json.dumps(before[k])} -> {json.dumps(after[k])}" for k in changed)
    else:
        what = f"{len(changed)} columns"
    return [format_rfc3339(entry["at"]), entry["schedule_name"], entry["operation"], entry["who"],
            entry["application_name"] or "-", what]


def cmd_audit(args: argparse.Namespace, dsn: str) -> int:
    from .formats import render_table
    since = parse_duration(args.since, "since") if args.since else None
    entries = api.audit(dsn, args.name, since, schema=args.schema)
    text = render_table(("at", "schedule", "operation", "who", "application", "changes"),
                        [_audit_line(e) for e in entries]) if entries else "no changes"
    _emit(args, entries, text)
    return 0


def _calendar_text(c: dict) -> str:
    users = c.get("schedules")
    return (f"{c['name']}\t{len(c['dates'])} date(s): {', '.join(d.isoformat() for d in c['dates'])}"
            + (f"\tused by: {', '.join(users)}" if users else ""))


def cmd_calendar(args: argparse.Namespace, dsn: str) -> int:
    if args.action == "add":
        cal = api.add_calendar(dsn, args.calendar_name, args.dates, schema=args.schema)
        _emit(args, cal, "calendar " + _calendar_text(cal))
    elif args.action == "remove":
        api.remove_calendar(dsn, args.calendar_name, schema=args.schema)
        _emit(args, {"removed": args.calendar_name}, f"removed calendar {args.calendar_name}")
    else:
        cals = api.list_calendars(dsn, schema=args.schema)
        _emit(args, cals, "\n".join(_calendar_text(c) for c in cals) or "no calendars")
    return 0


def cmd_ledger(args: argparse.Namespace, dsn: str) -> int:
    done = api.maintain_ledger(dsn, args.retention, schema=args.schema) if args.maintain else []
    parts = api.ledger_partitions(dsn, schema=args.schema)
    lines = [f"{r['partition_name']}\t{r['action']}" for r in done]
    lines += [f"{r['name']}\t{r['holds']}\t~{r['rows_estimate']} rows\t{r['bytes'] / 1e6:.1f} MB" for r in parts]
    _emit(args, {"maintenance": done, "partitions": parts} if args.maintain else parts, "\n".join(lines))
    return 0


def cmd_preview(args: argparse.Namespace, dsn: str) -> int:
    from .preview import run_preview
    return run_preview(args)


def cmd_demo(args: argparse.Namespace, dsn: str) -> int:
    from .demo import run_demo
    return run_demo(args)


#: Commands that need no database.
_OFFLINE = {"preview", "demo"}
#: Commands that do not read the runledger tables (migrate makes them); the others check the schema first.
_NO_TABLES = _OFFLINE | {"migrate"}
#: Commands that report an unreachable database themselves (a probe's exit 1, doctor's FAIL line).
_REPORT_UNREACHABLE = {"health", "doctor"}
#: Commands that need an extra, checked before anything else.
_EXTRA_OF = {"web": "web", "demo": "embedded"}
COMMANDS: dict[str, Callable[[argparse.Namespace, str], int]] = {
    name.removeprefix("cmd_"): fn for name, fn in globals().items() if name.startswith("cmd_")}


# ---------------------------------------------------------------------------
# The parser


def _global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """--dsn, --schema and --app; on subcommands they default to "not given" so the top level's value stands."""
    keep = {} if top else {"default": argparse.SUPPRESS}
    parser.add_argument("--dsn", help="Postgres DSN (else env RUNLEDGER_DSN, else --app's runledger_dsn)",
                        **({"default": None} if top else keep))
    parser.add_argument("--dsn-file", metavar="PATH", help="read the DSN from this file (its first line)",
                        **({"default": None} if top else keep))
    parser.add_argument("--schema", help="schema of the runledger tables (else env RUNLEDGER_SCHEMA, else runledger)",
                        **({"default": os.environ.get("RUNLEDGER_SCHEMA", "runledger")} if top else keep))
    parser.add_argument("--app", help="Celery app, e.g. proj.celery:app or proj.celery",
                        **({"default": None} if top else keep))


def _definition_args(p: argparse.ArgumentParser, update: bool) -> None:
    p.add_argument("name", help="schedule name (unique)")
    p.add_argument("--task", required=not update, help="Celery task name to send")
    form = p.add_mutually_exclusive_group(required=not update)
    form.add_argument("--cron", help="cron expression: 5 fields, 6 with seconds first, or @daily etc.")
    form.add_argument("--every", help="interval: 30s, 5m, 1h30m or seconds")
    form.add_argument("--at", help="ISO 8601 instant for a one-off")
    p.add_argument("--tz", dest="timezone", help="IANA time zone of the cron expression (default UTC)")
    p.add_argument("--args", help="JSON list of positional arguments")
    p.add_argument("--kwargs", help="JSON object of keyword arguments")
    p.add_argument("--queue", help="queue to send to")
    p.add_argument("--routing-key", help="routing key to send with")
    p.add_argument("--priority", type=Bounded(int, MIN_PRIORITY, MAX_PRIORITY),
                   help=f"message priority {MIN_PRIORITY}..{MAX_PRIORITY}")
    p.add_argument("--expires", help="seconds (or duration) after the fire's instant the message expires")
    p.add_argument("--jitter", type=Bounded(int, 0, MAX_JITTER_SECONDS),
                   help=f"max jitter in seconds, 0..{MAX_JITTER_SECONDS} (deterministic per schedule)")
    p.add_argument("--misfire", help="fire_once (default) or skip: what to do with fires missed in an outage")
    p.add_argument("--grace", help="seconds (or duration) a missed fire may be late and still run")
    p.add_argument("--overlap", help="while the previous run is live: allow (default), skip the fire, buffer_one "
                                      "(one fire waits, later ones skipped) or cancel_other (revoke the live run)")
    p.add_argument("--overlap-terminate", action=argparse.BooleanOptionalAction, default=None,
                   help="cancel_other: also terminate a run already started (revoke with terminate=True)")
    p.add_argument("--start", help="ISO 8601: no fire before this instant (also the interval anchor)")
    p.add_argument("--end", help="ISO 8601: no fire after this instant")
    p.add_argument("--org", help="organization UUID")
    p.add_argument("--skip-dates", metavar="DATES",
                   help="local dates (schedule's zone) with no fire, e.g. 2026-12-25,2026-12-26"
                        + (" ('' clears them)" if update else ""))
    p.add_argument("--calendar", metavar="NAME",
                   help="a named calendar whose dates are skipped too (runledger-beat calendar add)"
                        + (" ('' clears it)" if update else ""))
    p.add_argument("--day-and", action="store_true", default=None,
                   help="AND day-of-month and day-of-week (Celery's crontab) instead of cron's OR")
    if update:
        state = p.add_mutually_exclusive_group()
        state.add_argument("--paused", dest="active", action="store_false", default=None, help="pause it")
        state.add_argument("--active", dest="active", action="store_true", default=None, help="activate it")
    else:
        p.add_argument("--paused", dest="active", action="store_false", default=True, help="create it paused")


def _subcommands(sub: Any) -> dict[str, argparse.ArgumentParser]:
    helps = {
        "migrate": "create or upgrade the tables", "add": "create a schedule",
        "update": "change a schedule (only the given options)", "list": "list schedules",
        "show": "one schedule, its next fires and latest runs", "pause": "stop a schedule firing",
        "resume": "start a paused schedule again from now", "remove": "delete a schedule (its ledger stays)",
        "trigger": "fire a schedule now, out of band", "history": "latest ledger rows of a schedule",
        "sync": "import a Celery app's beat_schedule", "stats": "per-schedule counts and lag percentiles",
        "beats": "the running beats: host, pid, version, last tick",
        "health": "exit 0 when some beat ticked recently, else 1 (for probes)",
        "doctor": "check database, schema, privileges, clock, LISTEN, workers and (with --app) the broker",
        "web": "a dashboard of beats, schedules and their runs in the browser",
        "backfill": "record the missed fires of a time range (a running beat publishes them)",
        "calendar": "named sets of skip dates shared by schedules: add, list, remove",
        "audit": "changes to schedules: who, when, what (API, CLI, raw SQL)",
        "preview": "the next fires of a timing (no database needed)",
        "ledger": "the ledger's day partitions; --maintain creates and drops them now",
        "demo": "the scheduler at work on an embedded Postgres (no services needed)"}
    parsers = {}
    for name in COMMANDS:
        p = sub.add_parser(name, help=helps[name], description=helps[name])
        _global_options(p, top=False)
        if name not in ("preview", "demo", "web", "calendar"):  # calendar's actions take --json themselves
            p.add_argument("--json", action="store_true", help="machine-readable output")
        parsers[name] = p
    return parsers


def _calendar_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION", help="add, list or remove")
    add = actions.add_parser("add", help="create a calendar or add dates to it")
    add.add_argument("calendar_name", metavar="NAME", help="calendar name")
    add.add_argument("--dates", required=True, help="local dates, e.g. 2026-12-25,2026-12-26")
    actions.add_parser("list", help="every calendar and the schedules using it")
    remove = actions.add_parser("remove", help="delete a calendar no schedule uses")
    remove.add_argument("calendar_name", metavar="NAME", help="calendar name")
    for sub in (add, remove, actions.choices["list"]):
        _global_options(sub, top=False)
        sub.add_argument("--json", action="store_true", help="machine-readable output")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    from .demo.runner import add_demo_arguments
    from .preview import add_preview_arguments
    parser = argparse.ArgumentParser(prog="runledger-beat",
                                     description="Manage runledger_beat schedules and read the ledger.")
    _global_options(parser, top=True)
    parser.add_argument("--version", action="version", version=f"runledger-beat {__version__}")
    p = _subcommands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do"))
    _definition_args(p["add"], update=False)
    _definition_args(p["update"], update=True)
    p["list"].add_argument("--task", help="only schedules of this task")
    for name in ("show", "pause", "resume", "remove", "trigger", "history"):
        p[name].add_argument("name", help="schedule name")
    p["pause"].add_argument("--note", help="why it is paused (kept with when and who until resume)")
    p["history"].add_argument("--limit", type=Bounded(int, 1, MAX_HISTORY_ROWS), default=20,
                              help=f"how many rows, 1..{MAX_HISTORY_ROWS} (default 20)")
    p["history"].add_argument("--status", help="only rows of this status")
    p["stats"].add_argument("name", nargs="?", default=None, help="only this schedule")
    p["stats"].add_argument("--since", metavar="DURATION", help="only fires scheduled within this long ago (1h, 7d)")
    p["health"].add_argument("--max-age", type=Bounded(float, 1, MAX_HEALTH_AGE), default=30.0, metavar="SECONDS",
                             help=f"healthy when some beat ticked within this many seconds, 1..{MAX_HEALTH_AGE} "
                                  "(default 30)")
    p["health"].add_argument("--this-host", action="store_true",
                             help="count only beats on this host (a pod's own beat, for a liveness probe)")
    p["web"].add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p["web"].add_argument("--port", type=Bounded(int, 1, 65535), default=8080,
                          help="port to listen on, 1..65535 (default 8080)")
    p["web"].add_argument("--allow-host", action="append", metavar="HOST",
                          help="a name the Host header may carry (repeatable; besides --host, localhost, "
                               "127.0.0.1 and ::1); any other Host gets 400, which stops DNS rebinding")
    p["web"].add_argument("--https", action="store_true",
                          help="it is served over HTTPS (by a TLS proxy): the session cookie is Secure "
                               "(__Host-runledger_session) and HSTS is sent")
    p["web"].add_argument("--private", action="store_true",
                          help="reading needs the token too: every page and /api/* wants a login or "
                               "'Authorization: Bearer' (/healthz stays open)")
    p["web"].add_argument("--read-only", action="store_true",
                          help="refuse every change even when RUNLEDGER_WEB_TOKEN is set (without the token the "
                               "dashboard is read-only anyway; with --private the token still opens the reads)")
    p["web"].add_argument("--allow-actions", action="store_true",
                          help="removed: set RUNLEDGER_WEB_TOKEN to allow changes (given, it exits 2 saying so)")
    p["backfill"].add_argument("name", help="schedule name")
    p["backfill"].add_argument("--from", dest="start", required=True, metavar="ISO",
                               help="first instant of the range (naive: the schedule's zone)")
    p["backfill"].add_argument("--to", dest="end", required=True, metavar="ISO", help="end of the range (excluded)")
    p["backfill"].add_argument("--max", type=Bounded(int, 1, MAX_BACKFILL_SLOTS), default=10000, metavar="N",
                               help="refuse (exit 2, nothing written) if the range holds more slots, "
                                    f"1..{MAX_BACKFILL_SLOTS} (default 10000)")
    _calendar_arguments(p["calendar"])
    p["audit"].add_argument("name", nargs="?", default=None, help="only this schedule")
    p["audit"].add_argument("--since", metavar="DURATION", help="only changes within this long ago (1h, 7d)")
    add_preview_arguments(p["preview"])
    p["ledger"].add_argument("--maintain", action="store_true",
                             help="create day partitions a week ahead and drop those past --retention now "
                                  "(every beat does it hourly)")
    p["ledger"].add_argument("--retention", default="30d", metavar="DURATION",
                             help="with --maintain: ledger kept, at least 1d; 0 keeps it all (default 30d, "
                                  "as runledger_retention)")
    add_demo_arguments(p["demo"])
    return parser


def check_schema(args: argparse.Namespace, dsn: str) -> None:
    """ConfigError in one line unless the schema holds the runledger tables at the shipped migration."""
    timeout = max(1, min(5, int(args.max_age))) if args.command == "health" else 5
    try:
        conn = connect(dsn, args.schema, autocommit=True, connect_timeout=timeout,
                       application_name="runledger_beat.cli")
    except psycopg.OperationalError:
        if args.command in _REPORT_UNREACHABLE:
            return
        raise
    with conn:
        # doctor's report says which migrations are pending itself
        require_schema(conn, args.schema, up_to_date=args.command != "doctor")


def main(argv: list[str] | None = None) -> int:
    """Run one command; returns the exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    dsn = ""
    token = APPLICATION_NAME.set(CLI_APPLICATION_NAME)
    try:
        if args.command in _EXTRA_OF:
            require(args.command, _EXTRA_OF[args.command], UsageError)
        if args.command not in _OFFLINE:
            dsn = check_dsn(_dsn(args))
        if args.command not in _NO_TABLES:
            check_schema(args, dsn)
        return COMMANDS[args.command](args, dsn)
    except ScheduleError as exc:
        print(f"error: {exc.field}: {exc.reason}", file=sys.stderr)
        return 2
    except (UsageError, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except psycopg.Error as exc:
        print(f"error: database {redact_dsn(dsn)}: {safe_error(exc, dsn)}", file=sys.stderr)
        return 1
    finally:
        APPLICATION_NAME.reset(token)


if __name__ == "__main__":
    sys.exit(main())
