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
  sync: {"created", "updated", "unchanged", "deactivated", "refused": {name: text}, "errors" (the same),
  "written"} (exit 2 when an entry was refused, nothing written, unless --skip-invalid);
  import-from: {"created": [name], "updated": [name], "unchanged": [name], "refused": {name: text},
  "dry_run", "written"} (exit 2 when an entry was refused, nothing written, unless --skip-invalid);
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
import sys
from collections.abc import Callable

import psycopg

from ..db.connect import APPLICATION_NAME, check_dsn, connect
from ..db.migrate import require_schema
from ..db.redaction import redact_dsn, safe_error
from ..errors import ConfigError, ScheduleError, UsageError
from ..extras import require
from . import imports, operations, parser, schedules
from .common import CLI_APPLICATION_NAME, dsn_of

__all__ = ["CLI_APPLICATION_NAME", "COMMANDS", "build_parser", "main"]


#: Every command by name: a function taking the parsed arguments and the DSN, returning the exit code.
COMMANDS: dict[str, Callable[[argparse.Namespace, str], int]] = {
    name.removeprefix("cmd_").replace("_", "-"): fn for module in (schedules, operations, imports)
    for name, fn in vars(module).items() if name.startswith("cmd_")}


def build_parser() -> argparse.ArgumentParser:
    """The whole command line."""
    return parser.build(COMMANDS)
#: Commands that need no database.
_OFFLINE = {"preview", "demo", "grants"}

#: Commands that do not read the runledger tables (migrate makes them); the others check the schema first.
_NO_TABLES = _OFFLINE | {"migrate"}

#: Commands that report an unreachable database themselves (a probe's exit 1, doctor's FAIL line).
_REPORT_UNREACHABLE = {"health", "doctor"}

#: Commands that need an extra, checked before anything else.
_EXTRA_OF = {"web": "web", "demo": "embedded"}

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
            dsn = check_dsn(dsn_of(args))
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
