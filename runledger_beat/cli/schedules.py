"""`runledger-beat` commands over schedules and their ledger: add, update, list, show, pause, resume, remove,
trigger, history, backfill, audit, calendar, sync. Each takes the parsed arguments and the DSN, prints, and
returns the exit code."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from .. import api
from ..db.connect import connect
from ..errors import ScheduleError, UsageError
from ..ops.output import jsonable
from ..timing.formats import format_rfc3339, parse_duration
from .common import (
    definition_fields,
    emit,
    job_line,
    load_app,
    schedule_line,
)


def cmd_add(args: argparse.Namespace, dsn: str) -> int:
    row = api.create(dsn, args.name, schema=args.schema, **definition_fields(args))
    emit(args, row, "added " + schedule_line(row))
    return 0

def cmd_update(args: argparse.Namespace, dsn: str) -> int:
    row = api.update(dsn, args.name, schema=args.schema, **definition_fields(args))
    emit(args, row, "updated " + schedule_line(row))
    return 0

def cmd_list(args: argparse.Namespace, dsn: str) -> int:
    from ..ops.listing import MAX_LIST_ROWS, schedule_page
    with connect(dsn, args.schema, autocommit=True, application_name="runledger_beat.cli") as conn:
        page = schedule_page(conn, limit=args.limit, after=args.after, q=args.search, task=args.task,
                             high=MAX_LIST_ROWS)
    rows = [api.public(r) for r in page.rows]
    emit(args, rows, "\n".join(schedule_line(r) for r in rows) or "no schedules")
    if page.after is not None:  # on stderr, so the --json output stays one document
        print(f"more schedules follow: add --after {shlex.quote(page.after)}", file=sys.stderr)
    return 0

def cmd_show(args: argparse.Namespace, dsn: str) -> int:
    row = api.get(dsn, args.name, schema=args.schema)
    if row is None:
        raise ScheduleError("name", f"no schedule named {args.name!r}")
    fires = api.next_fires(dsn, args.name, 5, schema=args.schema)
    jobs = api.history(dsn, args.name, limit=5, schema=args.schema)
    text = "\n".join([f"{k}: {jsonable(v)}" for k, v in row.items()]
                     + ["next fires:"] + [f"  {format_rfc3339(f)}" for f in fires]
                     + ["history:"] + [f"  {job_line(j)}" for j in jobs])
    emit(args, {"schedule": row, "next_fires": fires, "history": jobs}, text)
    return 0

def cmd_pause(args: argparse.Namespace, dsn: str) -> int:
    row = api.pause(dsn, args.name, note=args.note, schema=args.schema)
    emit(args, row, "paused " + schedule_line(row))
    return 0

def cmd_resume(args: argparse.Namespace, dsn: str) -> int:
    row = api.resume(dsn, args.name, schema=args.schema)
    emit(args, row, "resumed " + schedule_line(row))
    return 0

def cmd_remove(args: argparse.Namespace, dsn: str) -> int:
    api.remove(dsn, args.name, schema=args.schema)
    emit(args, {"removed": args.name}, f"removed {args.name}")
    return 0

def cmd_trigger(args: argparse.Namespace, dsn: str) -> int:
    job = api.trigger(dsn, args.name, schema=args.schema)
    emit(args, job, f"triggered {args.name}: ledger row {job['id']} (pending; a running beat publishes it)")
    return 0

def cmd_history(args: argparse.Namespace, dsn: str) -> int:
    jobs = api.history(dsn, args.name, limit=args.limit, status=args.status, schema=args.schema)
    emit(args, jobs, "\n".join(job_line(j) for j in jobs) or "no ledger rows")
    return 0

def cmd_backfill(args: argparse.Namespace, dsn: str) -> int:
    result = api.backfill(dsn, args.name, args.start, args.end, args.max, schema=args.schema)
    emit(args, result, f"backfilled {args.name}: {result['slots']} slot(s), {result['created']} recorded, "
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
    from ..ops.output import render_table
    since = parse_duration(args.since, "since") if args.since else None
    entries = api.audit(dsn, args.name, since, schema=args.schema)
    text = render_table(("at", "schedule", "operation", "who", "application", "changes"),
                        [_audit_line(e) for e in entries]) if entries else "no changes"
    emit(args, entries, text)
    return 0

def _calendar_text(c: dict) -> str:
    users = c.get("schedules")
    return (f"{c['name']}\t{len(c['dates'])} date(s): {', '.join(d.isoformat() for d in c['dates'])}"
            + (f"\tused by: {', '.join(users)}" if users else ""))

def cmd_calendar(args: argparse.Namespace, dsn: str) -> int:
    if args.action == "add":
        cal = api.add_calendar(dsn, args.calendar_name, args.dates, schema=args.schema)
        emit(args, cal, "calendar " + _calendar_text(cal))
    elif args.action == "remove":
        api.remove_calendar(dsn, args.calendar_name, schema=args.schema)
        emit(args, {"removed": args.calendar_name}, f"removed calendar {args.calendar_name}")
    else:
        cals = api.list_calendars(dsn, schema=args.schema)
        emit(args, cals, "\n".join(_calendar_text(c) for c in cals) or "no calendars")
    return 0

def cmd_sync(args: argparse.Namespace, dsn: str) -> int:
    from ..importer import sync_beat_schedule
    if not args.app:
        raise UsageError("--app: sync needs --app proj.celery")
    app = load_app(args.app)
    with connect(dsn, args.schema) as conn:
        report = sync_beat_schedule(conn, app, app.conf.beat_schedule or {}, skip_invalid=args.skip_invalid,
                                    dry_run=args.dry_run)
    counts = ", ".join(f"{k}={report[k]}" for k in ("created", "updated", "unchanged", "deactivated"))
    emit(args, report, ("dry run, nothing written: " + counts if args.dry_run else counts if report["written"]
                        else "nothing written: an entry was refused (--skip-invalid imports the others)")
         + "".join(f"\nrefused: {e}" for e in report["refused"].values()))
    return 2 if report["refused"] and not args.skip_invalid else 0
