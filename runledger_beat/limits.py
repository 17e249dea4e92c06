"""The bounds every schedule row must respect, shared by Python validation and the SQL constraints.

The CHECK constraints in sql/migrations mirror these numbers; change both together.
"""

from __future__ import annotations

#: Celery publish options a schedule may carry (the one list).
OPTION_KEYS = ("queue", "routing_key", "exchange", "exchange_type", "priority", "expires", "time_limit",
               "soft_time_limit", "headers", "ignore_result")
#: Message headers a schedule's ``headers`` option may not set: Celery's protocol and runledger's own.
PROTOCOL_HEADERS = frozenset({
    "lang", "task", "id", "root_id", "parent_id", "group", "meth", "shadow", "eta", "expires", "retries",
    "timelimit", "argsrepr", "kwargsrepr", "origin", "ignore_result", "replaced_task_nesting",
    "stamped_headers", "stamps", "runledger_id", "_schedule"})
MAX_NAME_LEN = 200
MAX_TASK_LEN = 200
MAX_TZ_LEN = 64
MAX_CRON_LEN = 256
#: Longest duration accepted anywhere (interval, expires, time limits, grace): ten years.
MAX_SECONDS = 315_360_000
MAX_TEMPLATE_BYTES = 1 << 20
#: Deepest JSON nesting accepted in args and kwargs.
MAX_JSON_DEPTH = 64
JOB_STATUSES = ("pending", "sent", "received", "started", "retry", "success", "failure", "revoked", "skipped",
                "lost", "expired", "failed", "buffered")
