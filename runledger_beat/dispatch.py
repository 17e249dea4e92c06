"""Publishing fires to the Celery broker as ordinary task messages.

The message is what ``task.apply_async`` would send (protocol 2, the app's
routing, serializer and publish signals), with task_id = ledger row id and the
ledger id and ``_schedule`` metadata in message headers, never in kwargs. It is
built with ``app.amqp`` directly rather than ``send_task`` so a batch reuses one
producer and skips per-call result-backend set-up (beat never reads results).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from celery import Celery

from .materialize import Fire
from .payload import LEDGER_HEADER, SCHEDULE_HEADER, task_arguments

log = logging.getLogger("runledger_beat.dispatch")

#: Keys of a schedule's ``options`` passed to Celery's publish.
PUBLISH_OPTIONS = ("queue", "routing_key", "exchange", "exchange_type", "priority",
                   "expires", "headers", "time_limit", "soft_time_limit",
                   "serializer", "compression", "delivery_mode", "ignore_result")


class PublishError(Exception):
    """Publishing stopped; ``sent`` holds the ids already handed to the broker."""

    def __init__(self, error: BaseException, sent: list) -> None:
        super().__init__(str(error))
        self.error = error
        self.sent = sent


class Dispatcher:
    """Turns fires into Celery messages on one producer."""

    def __init__(self, app: Celery, send_sent_events: bool = True) -> None:
        self.app = app
        self.send_sent_events = send_sent_events

    def _options(self, fire: Fire) -> dict[str, Any]:
        task = self.app.tasks.get(fire.job_type)
        options: dict[str, Any] = {}
        if task is not None:
            options.update(task._get_exec_options())  # queue/routing set on @app.task
        options.update({k: v for k, v in (fire.options or {}).items() if k in PUBLISH_OPTIONS and v is not None})
        return options

    def publish_one(self, producer: Any, fire: Fire) -> None:
        """Send one fire's message on ``producer``; raises on broker failure."""
        app = self.app
        args, kwargs = task_arguments(fire.payload)
        options = self._options(fire)
        headers = dict(options.pop("headers", None) or {})
        headers[LEDGER_HEADER] = str(fire.id)
        headers["celery_beat_task"] = True
        if isinstance(fire.payload, dict) and SCHEDULE_HEADER in fire.payload:
            headers[SCHEDULE_HEADER] = fire.payload[SCHEDULE_HEADER]
        time_limit = options.pop("time_limit", None)
        soft_time_limit = options.pop("soft_time_limit", None)
        expires = options.pop("expires", None)
        ignore_result = bool(options.pop("ignore_result", False))
        task = app.tasks.get(fire.job_type)
        options = app.amqp.router.route(options, fire.job_type, args, kwargs, task)
        if expires is not None:
            options["expiration"] = max(float(expires), 0.0)
        task_id = str(fire.id)
        message = app.amqp.create_task_message(
            task_id, fire.job_type, args, kwargs,
            expires=expires, time_limit=time_limit, soft_time_limit=soft_time_limit,
            create_sent_event=self.send_sent_events, root_id=task_id,
            ignore_result=ignore_result,
        )
        app.amqp.send_task_message(producer, fire.job_type, message, headers=headers,
                                   retry=False, **options)

    def publish(self, producer: Any, fires: Iterable[Fire]) -> list:
        """Send fires in order; on the first failure raise PublishError with those sent so far."""
        sent: list = []
        for fire in fires:
            try:
                self.publish_one(producer, fire)
            except Exception as exc:
                raise PublishError(exc, sent) from exc
            sent.append(fire.id)
        return sent
