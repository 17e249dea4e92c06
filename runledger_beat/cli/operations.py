"""`runledger-beat` commands for operating it: migrate, stats, beats, health, doctor, web, ledger, grants, preview,
demo. Each takes the parsed arguments and the DSN, prints, and returns the exit code."""

from __future__ import annotations

import argparse
import shlex
import socket
import sys

import psycopg

from .. import api
from ..db.connect import connect
from ..db.migrate import migrate
from ..db.redaction import redact_dsn, safe_error
from ..errors import UsageError
from ..spec import check_seconds
from ..timing.formats import format_rfc3339
from .common import (
    emit,
    load_app,
)


def cmd_migrate(args: argparse.Namespace, dsn: str) -> int:
    with connect(dsn, "public") as conn:
        applied = migrate(conn, args.schema)
    emit(args, {"applied": applied}, "applied: " + (", ".join(applied) or "nothing (up to date)"))
    return 0

def cmd_stats(args: argparse.Namespace, dsn: str) -> int:
    from ..ops.stats import render, stats_page
    since = check_seconds("since", args.since) if args.since else None
    with connect(dsn, args.schema, autocommit=True) as conn:
        items, after = stats_page(conn, args.name, since, after=args.after, limit=args.limit)
    emit(args, items, render(items))
    if after is not None:  # on stderr, so the --json output stays one document
        print(f"more schedules follow: add --after {shlex.quote(after)}", file=sys.stderr)
    return 0

def cmd_beats(args: argparse.Namespace, dsn: str) -> int:
    from ..db.ops_store import OpsStore
    with connect(dsn, args.schema, autocommit=True, application_name="runledger_beat.cli") as conn:
        rows = OpsStore(conn).beats()
    lines = [f"{r['host']}\tpid={r['pid']}\tv{r['version']}\tstarted={format_rfc3339(r['started_at'])}"
             f"\tlast_tick={r['age_seconds']:.1f}s ago" + ("\tpreparing" if r["preparing"] else "") + f"\t{r['id']}"
             for r in rows]
    emit(args, rows, "\n".join(lines) or "no beats")
    return 0

def cmd_health(args: argparse.Namespace, dsn: str) -> int:
    from ..db.ops_store import OpsStore
    try:
        with connect(dsn, args.schema, autocommit=True, connect_timeout=max(1, min(5, int(args.max_age))),
                     application_name="runledger_beat.health") as conn:
            row = OpsStore(conn).freshest_beat(socket.gethostname() if args.this_host else None)
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
    emit(args, dict(row, healthy=healthy, max_age=args.max_age), text)
    return 0 if healthy else 1

def cmd_doctor(args: argparse.Namespace, dsn: str) -> int:
    from ..ops.doctor import as_json, diagnose
    checks = diagnose(dsn, args.schema, load_app(args.app) if args.app else None)
    report = as_json(checks)
    emit(args, report, "\n".join(c.line() for c in checks))
    return 0 if report["ok"] else 1

def cmd_web(args: argparse.Namespace, dsn: str) -> int:
    if args.allow_actions:
        raise UsageError("web: --allow-actions is gone: set RUNLEDGER_WEB_TOKEN to allow changes "
                         "(API: Authorization: Bearer <token>; pages: log in with it)")
    from ..ops.web import serve, token_from_env
    serve(dsn, args.schema, args.host, args.port, token_from_env(), read_only=args.read_only,
          private=args.private, https=args.https, allowed_hosts=args.allow_host)
    return 0

def cmd_ledger(args: argparse.Namespace, dsn: str) -> int:
    done = api.maintain_ledger(dsn, args.retention, schema=args.schema) if args.maintain else []
    parts = api.ledger_partitions(dsn, schema=args.schema)
    lines = [f"{r['partition_name']}\t{r['action']}" for r in done]
    lines += [f"{r['name']}\t{r['holds']}\t~{r['rows_estimate']} rows\t{r['bytes'] / 1e6:.1f} MB" for r in parts]
    emit(args, {"maintenance": done, "partitions": parts} if args.maintain else parts, "\n".join(lines))
    return 0

def cmd_grants(args: argparse.Namespace, dsn: str) -> int:
    from ..db.grants import render, statements
    sql_text = render(args.kind, args.role, args.schema)
    emit(args, {"kind": args.kind, "role": args.role, "schema": args.schema,
                 "statements": [s.as_string(None) for s in statements(args.kind, args.role, args.schema)]},
          sql_text)
    return 0

def cmd_preview(args: argparse.Namespace, dsn: str) -> int:
    from ..ops.preview import run_preview
    return run_preview(args)

def cmd_demo(args: argparse.Namespace, dsn: str) -> int:
    from ..demo import run_demo
    return run_demo(args)
