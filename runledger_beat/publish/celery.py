"""Celery's own path to the broker: its producer, message by message, with its publish signals and sent events.

Taken on every transport but py-amqp and Redis, and whenever sent events are on. On RabbitMQ the messages go on a
channel in confirm mode: a fire counts as sent once the broker confirms its message, and no wait is unbounded.
On other transports a fire counts as sent once its transport's publish returns, and a channel error fails that
fire alone.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from . import amqp
from .fires import NACKED, Outgoing, PublishResult, reason
from .link import BrokerLink
from .message import build_message, send_message

log = logging.getLogger(__name__)


class CeleryPublisher:
    """Publishes fires through Celery's ``send_task_message`` on a kombu producer of the beat's connection."""

    def __init__(self, app: Any, link: BrokerLink, send_sent_events: bool) -> None:
        self.app = app
        self.link = link
        self.send_sent_events = send_sent_events
        self._producer: Any = None

    def reset(self) -> None:
        """Forget the producer (its connection was dropped)."""
        self._producer = None

    def publish(self, outgoing: Sequence[Outgoing]) -> PublishResult:
        """Stock Celery publishing, one message at a time (built ahead where it could be); ``error`` is set on the
        result when the connection failed (the caller then drops it)."""
        try:
            if amqp.supported(self.link.connection()):
                return self._publish_confirmed(outgoing)
        except Exception as exc:
            return PublishResult(failed=[(o.fire, reason(exc)) for o in outgoing], error=exc)
        result = PublishResult()
        for index, item in enumerate(outgoing):
            fire = item.fire
            built, item.built = item.built, None
            try:
                if self._producer is None:
                    self._producer = self.app.amqp.Producer(self.link.connection(), auto_declare=False)
                send_message(self.app, self._producer, built or build_message(self.app, fire, self.send_sent_events))
            except Exception as exc:
                if self.link.is_connection_error(exc):
                    result.error = exc
                    result.failed.extend((o.fire, reason(exc)) for o in outgoing[index:])
                    return result
                log.warning("runledger: publishing %s (%s) failed: %s", fire.id, fire.job_type, reason(exc))
                result.failed.append((fire, reason(exc)))
                self._producer = None  # its channel may be closed by the broker
                continue
            result.sent.append(fire.id)
        return result

    def _publish_confirmed(self, outgoing: Sequence[Outgoing]) -> PublishResult:
        """Celery's producer message by message (task-sent events and all) on a channel in confirm mode: a fire
        counts as sent once the broker confirms its message, and no wait is unbounded (a partitioned broker
        would otherwise hold beat in a declare or a socket write for good, and the messages written into the
        dead socket would count as sent). A broken channel fails every fire not yet confirmed: a connection
        error sends them to the outage backlog, a channel error (the broker refused something) leaves them
        to the recovery sweep."""
        channel = self.link.confirm_channel()
        if self._producer is None or self._producer.channel is not channel.channel:
            self._producer = self.app.amqp.Producer(channel.channel, auto_declare=False)
        producer, result = self._producer, PublishResult()
        with channel.connection.transport.having_timeout(amqp.CONFIRM_TIMEOUT):
            for item in outgoing:
                fire, built, item.built = item.fire, item.built, None
                try:
                    message = built or build_message(self.app, fire, self.send_sent_events)
                    channel.publish_through(item, lambda m=message: send_message(self.app, producer, m))
                except Exception as exc:
                    log.warning("runledger: publishing %s (%s) failed: %s", fire.id, fire.job_type, reason(exc))
                    result.failed.append((fire, reason(exc)))
        channel.settle(wait=True)
        acked, nacked = channel.take()
        result.sent.extend(o.fire.id for o in acked)
        result.failed.extend((o.fire, NACKED) for o in nacked)
        if channel.error is not None:
            error, rest = channel.error, channel.abandon()
            result.failed.extend((o.fire, reason(error)) for o in rest)
            if self.link.is_connection_error(error):
                result.error = error
            else:
                self.link.forget_channel(channel)
                self._producer = None
                log.warning("runledger: the broker closed the publishing channel (%s); the %d fire(s) it had not "
                            "confirmed wait for the recovery sweep", reason(error), len(rest))
        return result
