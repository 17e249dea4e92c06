"""The limits every schedule and ledger row must keep, as Python constants.

``sql/migrations/0002_constraints.sql`` mirrors them as CHECK constraints on
``job_schedules`` and ``jobs`` (tests/db/test_constraints.py checks that the two
agree). Python validation imports these so an error names the field before the
database would refuse the row; the database still guards raw SQL writes.
"""

from __future__ import annotations

from datetime import datetime, timezone

#: Celery publish options a schedule may carry, in this order.
OPTION_KEYS: tuple[str, ...] = ("queue", "routing_key", "exchange", "exchange_type", "priority", "expires",
                                "time_limit", "soft_time_limit", "headers", "ignore_result")
#: Options that are non-empty strings of at most MAX_OPTION_STRING_LEN characters.
STRING_OPTIONS: tuple[str, ...] = ("queue", "routing_key", "exchange", "exchange_type")
#: Options that are numbers of seconds, > 0 and <= MAX_SECONDS.
SECONDS_OPTIONS: tuple[str, ...] = ("expires", "time_limit", "soft_time_limit")
MAX_OPTION_STRING_LEN = 255
MIN_PRIORITY, MAX_PRIORITY = 0, 255

#: Header names a schedule's ``headers`` option may not set: Celery's protocol headers and runledger's own.
PROTOCOL_HEADERS: frozenset[str] = frozenset({
    "lang", "task", "id", "root_id", "parent_id", "group", "meth", "shadow", "eta", "expires", "retries",
    "timelimit", "argsrepr", "kwargsrepr", "origin", "ignore_result", "replaced_task_nesting",
    "stamped_headers", "stamps", "runledger_id", "_schedule",
})

#: Longest schedule name, task name, time zone name and cron expression (characters).
MAX_NAME_LEN = 200
MAX_TASK_LEN = 200
MAX_TZ_LEN = 64
MAX_CRON_LEN = 256

#: Ten years (365-day): the bound of every duration (interval, grace, expires, time limits).
MAX_SECONDS = 315360000
MIN_INTERVAL_SECONDS = 1
MAX_JITTER_SECONDS = 86400

#: payload_template as Postgres prints it (jsonb::text), in bytes: 1 MiB.
MAX_TEMPLATE_BYTES = 1048576
#: The only top-level keys of payload_template: {"args": [...], "kwargs": {...}}.
TEMPLATE_KEYS: tuple[str, ...] = ("args", "kwargs")

#: Every instant a schedule holds is in [MIN_INSTANT, MAX_INSTANT): a day inside Python's datetime range at both
#: ends, so it converts to any time zone (offsets are under a day) without leaving year 1..9999.
MIN_INSTANT = datetime(1, 1, 2, tzinfo=timezone.utc)
MAX_INSTANT = datetime(9999, 12, 31, tzinfo=timezone.utc)
#: The schedule columns holding instants.
INSTANT_COLUMNS: tuple[str, ...] = ("next_fire_at", "last_fired_at", "run_at", "anchor_at", "start_at", "end_at")

#: Ledger statuses: Celery's task states (lower case) plus runledger's own.
JOB_STATUSES: tuple[str, ...] = ("pending", "sent", "received", "started", "retry", "success", "failure",
                                 "revoked", "skipped", "lost", "expired", "failed", "buffered")
#: Deepest JSON nesting accepted in args, kwargs and headers (Python validation only).
MAX_JSON_DEPTH = 64
#: Integers accepted in args, kwargs and headers: a signed 64-bit integer, what Celery's consumers in other languages
#: and Postgres' bigint read without loss (Python validation only).
MIN_JSON_INT, MAX_JSON_INT = -(2**63), 2**63 - 1
