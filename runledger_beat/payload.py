"""What a fire carries: the ledger payload (template + ``_schedule``) and the task's arguments.

payload_template is ``{"args": [...], "kwargs": {...}}``. A template that is not a
JSON object (possible only in rows older than migration 0002) is wrapped as ``{"payload": template, "_schedule": ...}``;
the task then receives that template as its single positional argument.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from .timing.engine import format_rfc3339

#: Message header carrying the ledger row id (also the Celery task id).
LEDGER_HEADER = "runledger_id"
#: Message header carrying the schedule metadata dict.
SCHEDULE_HEADER = "_schedule"


def schedule_metadata(schedule_id: uuid.UUID | str, schedule_name: str,
                      scheduled_for: datetime) -> dict[str, str]:
    """The ``_schedule`` object: id, name and RFC 3339 ``scheduled_for`` with ``Z`` (fraction only when non-zero)."""
    return {
        "schedule_id": str(schedule_id),
        "schedule_name": schedule_name,
        "scheduled_for": format_rfc3339(scheduled_for),
    }


def merge_schedule_metadata(template: Any, metadata: dict[str, str]) -> dict[str, Any]:
    """A copy of the template with ``_schedule`` set; a non-object template is wrapped."""
    if isinstance(template, dict):
        merged = dict(template)
        merged[SCHEDULE_HEADER] = metadata
        return merged
    return {"payload": template, SCHEDULE_HEADER: metadata}


def template_problem(template: Any) -> str | None:
    """Why a stored payload_template cannot be run, or None. An object must be exactly
    ``{"args": [...], "kwargs": {...}}`` (either key may be missing); any other JSON value is the legacy
    single-argument form."""
    if not isinstance(template, dict):
        return None
    extra = sorted(set(template) - {"args", "kwargs"})
    if extra:
        return f"unexpected keys {', '.join(map(repr, extra))}; expected only args and kwargs"
    if not isinstance(template.get("args", []), list):
        return "args must be a JSON array"
    if not isinstance(template.get("kwargs", {}), dict):
        return "kwargs must be a JSON object"
    return None


def task_arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The (args, kwargs) a fire's task is called with, from its ledger payload; ValueError on a bad shape."""
    if not isinstance(payload, dict):
        return [payload], {}
    if "payload" in payload and "args" not in payload and "kwargs" not in payload:
        return [payload["payload"]], {}
    problem = template_problem({k: v for k, v in payload.items() if k != SCHEDULE_HEADER})
    if problem:
        raise ValueError(f"payload: {problem}")
    return list(payload.get("args") or []), dict(payload.get("kwargs") or {})


def schedule_info(request: Any) -> dict[str, str] | None:
    """Inside a task: the ``_schedule`` metadata of the fire being run, or None.

    Usage: ``@app.task(bind=True) def report(self): info = schedule_info(self.request)``.
    It is read from the message headers, so task signatures never change.
    """
    value = getattr(request, SCHEDULE_HEADER, None)
    if value is None:
        headers = getattr(request, "headers", None) or {}
        value = headers.get(SCHEDULE_HEADER)
    if value is None:
        return None
    info = dict(value)
    ledger_id = getattr(request, LEDGER_HEADER, None) or (getattr(request, "headers", None) or {}).get(LEDGER_HEADER)
    if ledger_id:
        info["ledger_id"] = ledger_id
    return info
