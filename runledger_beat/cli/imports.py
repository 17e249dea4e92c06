"""`runledger-beat import-from`: bring django-celery-beat's or redbeat's schedules into runledger (read-only on
the source). Prints created/updated/unchanged/refused; exit 2 when one was refused and --skip-invalid not
given (then nothing is written)."""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import psycopg

from ..db.connect import check_dsn, connect
from ..db.redaction import redact_dsn, safe_error
from ..errors import UsageError
from ..extras import require
from .common import emit, load_app

if TYPE_CHECKING:
    from ..imports.plan import Candidate

#: The source connection's application_name (the source's own activity views show it).
SOURCE_APPLICATION_NAME = "runledger-beat import-from"


def _django_candidates(args: argparse.Namespace) -> list[Candidate]:
    from ..imports import django_celery_beat
    source = check_dsn(args.location)
    try:
        with connect(source, args.source_schema, application_name=SOURCE_APPLICATION_NAME) as conn:
            conn.read_only = True
            return django_celery_beat.read(conn)
    except psycopg.Error as exc:
        raise _SourceError(f"source database {redact_dsn(source)}: {safe_error(exc, source)}") from None


def _redbeat_candidates(args: argparse.Namespace) -> list[Candidate]:
    require("import-from redbeat", "redis", UsageError)
    import redis

    from ..imports import redbeat
    if args.tz:
        app: Any = SimpleNamespace(conf=SimpleNamespace(timezone=args.tz, enable_utc=True))
    elif args.app:
        app = load_app(args.app)
    else:
        app = SimpleNamespace(conf=SimpleNamespace(timezone="UTC", enable_utc=True))
    try:
        client = redis.Redis.from_url(args.location, socket_timeout=10, socket_connect_timeout=5)
        with client:
            return redbeat.read(client, args.prefix, app)
    except (redis.RedisError, ValueError) as exc:
        raise _SourceError(f"redis {redact_dsn(args.location)}: {safe_error(exc, args.location)}") from None


class _SourceError(Exception):
    """The source cannot be read; the message never holds its password."""


def cmd_import_from(args: argparse.Namespace, dsn: str) -> int:
    # Celery's schedule classes (a tenth of a second to import) load only for the commands that read them.
    from ..imports.celery_schedules import Refused
    from ..imports.plan import apply, summary
    try:
        candidates = (_django_candidates if args.source == "django-celery-beat" else _redbeat_candidates)(args)
    except Refused as exc:
        raise UsageError(f"{args.source}: {exc.reason}") from None
    except _SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with connect(dsn, args.schema) as conn:
        report = apply(conn, candidates, dry_run=args.dry_run, skip_invalid=args.skip_invalid)
    emit(args, report, summary(report))
    return 2 if report["refused"] and not args.skip_invalid else 0
