"""`runledger-beat preview`: show the next fires of a cron / interval / one-off timing.

Mounted as a subcommand by cli.py (add_preview_arguments + run_preview), or run
on its own through preview_command(argv).
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from datetime import datetime, timezone

from ..errors import ScheduleError
from ..spec import check_skip_dates
from ..timing.cron import zone
from ..timing.engine import Timing, fire_times
from ..timing.formats import format_rfc3339, parse_duration, parse_instant
from ..timing.limits import MAX_JITTER_SECONDS
from .argtypes import Bounded
from .output import render_table

UTC = timezone.utc
#: Most fires one preview lists.
MAX_COUNT = 10000


def add_preview_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the preview options on `parser` (a subcommand parser or a fresh one)."""
    form = parser.add_mutually_exclusive_group(required=True)
    form.add_argument("--cron", metavar="EXPR", help="cron expression (5 or 6 fields, or @nickname)")
    form.add_argument("--every", metavar="DURATION", help="interval, e.g. 30s, 5m, 1h30m or seconds")
    form.add_argument("--at", metavar="ISO", help="one-off instant (ISO 8601; naive means --tz)")
    parser.add_argument("--tz", default="UTC", metavar="NAME", help="IANA time zone (default UTC)")
    parser.add_argument("--after", metavar="ISO", help="list fires after this instant (default now)")
    parser.add_argument("--count", type=Bounded(int, 1, MAX_COUNT), default=10, metavar="N",
                        help=f"how many fires, 1..{MAX_COUNT} (default 10)")
    parser.add_argument("--jitter", type=Bounded(int, 0, MAX_JITTER_SECONDS), default=0, metavar="S",
                        help=f"max jitter in seconds, 0..{MAX_JITTER_SECONDS}")
    parser.add_argument(
        "--id", default=str(uuid.UUID(int=0)), metavar="UUID", help="schedule id (seeds jitter and H fields)"
    )
    parser.add_argument("--skip-dates", metavar="DATES",
                        help="local dates (in --tz) with no fire, e.g. 2026-12-25,2026-12-26")
    parser.add_argument("--day-and", action="store_true",
                        help="with --cron: a day must match day-of-month AND day-of-week (as a Celery crontab "
                             "and a schedule stored with --day-and), not cron's OR")
    parser.add_argument("--json", action="store_true", help="print a JSON list of RFC 3339 UTC times")


def _timing(args: argparse.Namespace) -> Timing:
    """Build and validate the Timing the options describe."""
    skip = check_skip_dates(getattr(args, "skip_dates", None))
    if getattr(args, "day_and", False) and args.cron is None:
        raise ScheduleError("day_and", "--day-and applies to --cron only")
    if args.cron is not None:
        timing = Timing("cron", cron=args.cron, timezone=args.tz, max_jitter=args.jitter, skip_dates=skip,
                        day_and=bool(getattr(args, "day_and", False)))
    elif args.every is not None:
        timing = Timing("interval", every=parse_duration(args.every), timezone=args.tz, max_jitter=args.jitter,
                        skip_dates=skip)
    else:
        timing = Timing("once", at=parse_instant("at", args.at, args.tz), timezone=args.tz)
    return timing.validate()


def _table(fires: list[datetime], tz_name: str) -> str:
    """Readable table: #, UTC, local time with offset and abbreviation."""
    tz = zone(tz_name)
    rows = []
    for i, fire in enumerate(fires, 1):
        local = fire.astimezone(tz)
        name = local.tzname() or ""
        abbreviation = "" if name[:1] in "+-" else f" {name}"  # zones without one name it "+1030"
        rows.append((i, format_rfc3339(fire), f"{local:%Y-%m-%d %H:%M:%S} {local:%z}{abbreviation}"))
    return render_table(("#", "UTC", f"local ({tz_name})"), rows)


def run_preview(args: argparse.Namespace) -> int:
    """Print the fires for parsed `args`; 0 on success, 2 on invalid input."""
    try:
        try:
            schedule_id = uuid.UUID(args.id)
        except ValueError:
            raise ScheduleError("id", f"invalid UUID {args.id!r}") from None
        timing = _timing(args)
        after = parse_instant("after", args.after, args.tz) if args.after else datetime.now(UTC)
        if timing.kind == "once":  # a one-off is shown even if `after` is later
            fires = [timing.at.astimezone(UTC)] if timing.at else []
        else:
            fires = fire_times(timing, after, schedule_id, args.count)
    except ScheduleError as error:
        print(f"error: {error.field}: {error.reason}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([format_rfc3339(f) for f in fires]))
    else:
        print(_table(fires, args.tz))
    return 0


def preview_command(argv: list[str] | None = None) -> int:
    """Stand-alone entry: parse argv and run the preview."""
    parser = argparse.ArgumentParser(prog="runledger-beat preview", description="Show the next fires of a schedule.")
    add_preview_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # bad usage: argparse printed why
        return int(exc.code or 0)
    return run_preview(args)


if __name__ == "__main__":
    raise SystemExit(preview_command())
