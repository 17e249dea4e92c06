"""A fire as a stock Celery task message, built by Celery itself.

``send_fire`` runs ``app.amqp.create_task_message`` (``build_message``, which
may run ahead of the instant) and ``send_task_message`` (``send_message``)
(protocol 2, the app's routing, serializer and compression) as
``task.apply_async`` would, with task_id = ledger row id, and the ledger id and
``_schedule`` metadata in message headers, never in kwargs. The producer may be
a real kombu producer or the fast path's capturing one.

A schedule's options are limited to ``limits.OPTION_KEYS``, and its ``headers``
can never set a protocol header nor the signature: the task run is always the
schedule's ``job_type``, with the app's serializer. With ``runledger_signing_key``
set, every message carries its ``runledger_sig`` (signing.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..payload import LEDGER_HEADER, SCHEDULE_HEADER, task_arguments
from ..signing import SIG_HEADER, app_key, sign
from ..timing.limits import OPTION_KEYS, PROTOCOL_HEADERS
from .fires import Fire


def publish_options(app: Any, fire: Fire) -> dict[str, Any]:
    """The task's own exec options (set on ``@app.task``) overlaid with the schedule's allowed options."""
    task = app.tasks.get(fire.job_type)
    options: dict[str, Any] = dict(task._get_exec_options()) if task is not None else {}
    options.update({k: v for k, v in (fire.options or {}).items() if k in OPTION_KEYS and v is not None})
    return options


def message_headers(fire: Fire, extra: Any, key: bytes | None = None) -> dict[str, Any]:
    """The schedule's own headers (protocol ones and any signature dropped), then the ledger id, ``_schedule`` and,
    with a signing ``key``, the fire's signature."""
    headers = {k: v for k, v in (extra if isinstance(extra, dict) else {}).items()
               if isinstance(k, str) and k not in PROTOCOL_HEADERS and k != SIG_HEADER}
    headers[LEDGER_HEADER] = str(fire.id)
    headers["celery_beat_task"] = True  # as celery.beat sets it
    if isinstance(fire.payload, dict) and SCHEDULE_HEADER in fire.payload:
        headers[SCHEDULE_HEADER] = fire.payload[SCHEDULE_HEADER]
    if key is not None:
        headers[SIG_HEADER] = sign(key, str(fire.id), fire.job_type)
    return headers


@dataclass(slots=True)
class BuiltMessage:
    """A fire's message as ``create_task_message`` made it, with the arguments ``send_task_message`` takes.

    Sendable once: ``send_task_message`` merges the headers into it.
    """

    job_type: str
    message: Any
    options: dict[str, Any]


def build_message(app: Any, fire: Fire, sent_event: bool) -> BuiltMessage:
    """Build the fire's task message (Celery's ``create_task_message``, routing resolved); sent by ``send_message``.

    Built ahead of the instant (the lookahead), so only ``send_task_message``,
    with its publish signals, is left for the instant itself.
    """
    args, kwargs = task_arguments(fire.payload)
    options = publish_options(app, fire)
    headers = message_headers(fire, options.pop("headers", None), app_key(app))
    time_limit = options.pop("time_limit", None)
    soft_time_limit = options.pop("soft_time_limit", None)
    expires = options.pop("expires", None)
    ignore_result = bool(options.pop("ignore_result", False))
    options = app.amqp.router.route(options, fire.job_type, args, kwargs, app.tasks.get(fire.job_type))
    if isinstance(expires, (int, float)) and not isinstance(expires, bool):
        options["expiration"] = max(float(expires), 0.0)
    # Expiry counts from the fire's instant, even when the message is built ahead of it.
    now = app.now()
    if fire.scheduled_for is not None and fire.scheduled_for > now:
        now = fire.scheduled_for.astimezone(now.tzinfo)
    task_id = str(fire.id)
    message = app.amqp.create_task_message(
        task_id, fire.job_type, args, kwargs,
        expires=expires, time_limit=time_limit, soft_time_limit=soft_time_limit,
        create_sent_event=sent_event, root_id=task_id, ignore_result=ignore_result, now=now,
    )
    return BuiltMessage(fire.job_type, message, dict(options, headers=headers, retry=False))


def send_message(app: Any, producer: Any, built: BuiltMessage) -> None:
    """Celery's ``send_task_message`` of a built message on ``producer`` (real or capturing): the publish
    signals fire here."""
    app.amqp.send_task_message(producer, built.job_type, built.message, **built.options)


def send_fire(app: Any, producer: Any, fire: Fire, sent_event: bool) -> None:
    """Hand one fire to Celery's ``send_task_message`` on ``producer`` (real or capturing)."""
    send_message(app, producer, build_message(app, fire, sent_event))
