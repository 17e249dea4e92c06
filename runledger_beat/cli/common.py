"""What every `runledger-beat` command shares: output (text or --json), the DSN, the Celery app, a schedule's
fields from the options."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..db.redaction import dsn_has_password, read_dsn_file
from ..errors import UsageError
from ..ops.output import jsonable
from ..spec import parse_json
from ..timing.formats import format_rfc3339

#: The application_name of the command line's database sessions (the audit log and pause notes show it).
CLI_APPLICATION_NAME = "runledger-beat"

#: Most rows `history --limit` prints.
MAX_HISTORY_ROWS = 10000

#: Most slots `backfill --max` lets one range hold.
MAX_BACKFILL_SLOTS = 1_000_000

#: Longest `health --max-age`: a day.
MAX_HEALTH_AGE = 86400


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(jsonable(data), indent=2, sort_keys=True) if getattr(args, "json", False) else text)

def schedule_line(s: dict) -> str:
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

def job_line(j: dict) -> str:
    when = format_rfc3339(j["scheduled_for"]) if j["scheduled_for"] else "-"
    return f"{when}\t{j['stage']}\t{j['status']}\t{j['id']}" + (f"\t{j['last_error']}" if j["last_error"] else "")

def load_app(path: str) -> Any:
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

def dsn_of(args: argparse.Namespace) -> str:
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
        dsn = load_app(args.app).conf.get("runledger_dsn")
        if dsn:
            return dsn
    raise UsageError("no database: give --dsn, set RUNLEDGER_DSN, or --app with runledger_dsn")

_SIMPLE_FIELDS = {"task": "task", "cron": "cron", "every": "every", "at": "at", "timezone": "timezone",
                  "jitter": "max_jitter", "misfire": "misfire", "grace": "grace", "overlap": "overlap",
                  "start": "start", "end": "end", "org": "organization_id", "day_and": "day_and",
                  "active": "active", "skip_dates": "skip_dates", "calendar": "calendar",
                  "overlap_terminate": "overlap_terminate"}

_OPTION_FLAGS = ("queue", "routing_key", "priority", "expires")

def definition_fields(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for api.create/update from the given options only."""
    out = {key: getattr(args, attr) for attr, key in _SIMPLE_FIELDS.items() if getattr(args, attr, None) is not None}
    for field in ("args", "kwargs"):
        if getattr(args, field) is not None:
            out[field] = parse_json(field, getattr(args, field))
    options = {k: getattr(args, k) for k in _OPTION_FLAGS if getattr(args, k) is not None}
    if options:
        out["options"] = options
    return out
