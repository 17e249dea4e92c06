"""The whole `runledger-beat` command line: global options, each command's options and help."""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterable
from typing import Any

from ..ops.argtypes import Bounded
from ..ops.listing import MAX_LIST_ROWS, MAX_PAGE_ROWS, PAGE_ROWS
from ..timing.limits import MAX_JITTER_SECONDS, MAX_PRIORITY, MIN_PRIORITY
from ..version import __version__
from .common import MAX_BACKFILL_SLOTS, MAX_HEALTH_AGE, MAX_HISTORY_ROWS


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

def _subcommands(sub: Any, commands: Iterable[str]) -> dict[str, argparse.ArgumentParser]:
    helps = {
        "migrate": "create or upgrade the tables", "add": "create a schedule",
        "update": "change a schedule (only the given options)", "list": "list schedules",
        "show": "one schedule, its next fires and latest runs", "pause": "stop a schedule firing",
        "resume": "start a paused schedule again from now", "remove": "delete a schedule (its ledger stays)",
        "trigger": "fire a schedule now, out of band", "history": "latest ledger rows of a schedule",
        "sync": "import a Celery app's beat_schedule",
        "import-from": "import the schedules of django-celery-beat's tables or redbeat's Redis keys",
        "stats": "per-schedule counts and lag percentiles",
        "beats": "the running beats: host, pid, version, last tick",
        "health": "exit 0 when some beat ticked recently, else 1 (for probes)",
        "doctor": "check database, schema, privileges, clock, LISTEN, workers and (with --app) the broker",
        "web": "a dashboard of beats, schedules and their runs in the browser",
        "backfill": "record the missed fires of a time range (a running beat publishes them)",
        "calendar": "named sets of skip dates shared by schedules: add, list, remove",
        "audit": "changes to schedules: who, when, what (API, CLI, raw SQL)",
        "preview": "the next fires of a timing (no database needed)",
        "ledger": "the ledger's day partitions; --maintain creates and drops them now",
        "grants": "print the GRANT statements a role needs (beat, worker, cli, dashboard, dashboard-writer)",
        "demo": "the scheduler at work on an embedded Postgres (no services needed)"}
    parsers = {}
    for name in commands:
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

def _import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", choices=("django-celery-beat", "redbeat"), help="the scheduler to import from")
    p.add_argument("location", metavar="SOURCE",
                   help="django-celery-beat: the Django database's DSN; redbeat: the Redis URL")
    p.add_argument("--source-schema", default="public", metavar="S",
                   help="django-celery-beat: schema of its tables (default public); --schema is runledger's")
    p.add_argument("--prefix", default="redbeat:", help="redbeat: its key prefix (default redbeat:)")
    p.add_argument("--tz", metavar="NAME",
                   help="redbeat: zone its crontabs run in (the app's timezone; else --app's, else UTC)")
    p.add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    p.add_argument("--skip-invalid", action="store_true",
                   help="import the others when one is refused (it is still named; exit 0)")

def build(commands: Iterable[str]) -> argparse.ArgumentParser:
    """The whole command line, for these commands."""
    from ..demo.runner import add_demo_arguments
    from ..ops.preview import add_preview_arguments
    parser = argparse.ArgumentParser(prog="runledger-beat",
                                     description="Manage runledger_beat schedules and read the ledger.")
    _global_options(parser, top=True)
    parser.add_argument("--version", action="version", version=f"runledger-beat {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do")
    p = _subcommands(subparsers, commands)
    _definition_args(p["add"], update=False)
    _definition_args(p["update"], update=True)
    p["list"].add_argument("--task", help="only schedules of this task")
    p["list"].add_argument("--search", metavar="TEXT",
                           help="only schedules whose name or task contains TEXT (starts with it where the "
                                "database has no pg_trgm; see docs/operations.md)")
    p["list"].add_argument("--after", metavar="NAME", help="start after this name (the next page)")
    p["list"].add_argument("--limit", type=Bounded(int, 1, MAX_LIST_ROWS), default=PAGE_ROWS, metavar="N",
                           help=f"at most N schedules, by name, 1..{MAX_LIST_ROWS} (default {PAGE_ROWS}); "
                                "when more follow, stderr says how to go on")
    for name in ("show", "pause", "resume", "remove", "trigger", "history"):
        p[name].add_argument("name", help="schedule name")
    p["pause"].add_argument("--note", help="why it is paused (kept with when and who until resume)")
    p["history"].add_argument("--limit", type=Bounded(int, 1, MAX_HISTORY_ROWS), default=20,
                              help=f"how many rows, 1..{MAX_HISTORY_ROWS} (default 20)")
    p["history"].add_argument("--status", help="only rows of this status")
    p["stats"].add_argument("name", nargs="?", default=None, help="only this schedule")
    p["stats"].add_argument("--since", metavar="DURATION", help="only fires scheduled within this long ago (1h, 7d)")
    p["stats"].add_argument("--after", metavar="NAME", help="start after this schedule name (the next page)")
    p["stats"].add_argument("--limit", type=Bounded(int, 1, MAX_PAGE_ROWS), default=PAGE_ROWS, metavar="N",
                            help=f"at most N schedules, by name, 1..{MAX_PAGE_ROWS} (default {PAGE_ROWS})")
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
    p["sync"].add_argument("--skip-invalid", action="store_true",
                           help="import the other entries when one is refused (it is still named; exit 0)")
    p["sync"].add_argument("--dry-run", action="store_true", help="print what would change; write nothing")
    _import_arguments(p["import-from"])
    p["audit"].add_argument("name", nargs="?", default=None, help="only this schedule")
    p["audit"].add_argument("--since", metavar="DURATION", help="only changes within this long ago (1h, 7d)")
    add_preview_arguments(p["preview"])
    p["ledger"].add_argument("--maintain", action="store_true",
                             help="create day partitions a week ahead and drop those past --retention now "
                                  "(every beat does it hourly)")
    p["ledger"].add_argument("--retention", default="30d", metavar="DURATION",
                             help="with --maintain: ledger kept, at least 1d; 0 keeps it all (default 30d, "
                                  "as runledger_retention)")
    from ..db.grants import KINDS
    p["grants"].add_argument("kind", choices=list(KINDS), metavar="KIND",
                             help="; ".join(f"{kind}: {what}" for kind, what in KINDS.items()))
    p["grants"].add_argument("role", metavar="ROLE", help="the role to grant to (run the output as the schema's owner)")
    add_demo_arguments(p["demo"])
    return parser
